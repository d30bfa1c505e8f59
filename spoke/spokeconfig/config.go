// Package spokeconfig is the configuration of the nave-spoke binary, loaded by settings.Load
// and documented in docs/config.md.
package spokeconfig

import (
	"net"
	"regexp"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/navemesh/nave/shared/debounce"
	"github.com/navemesh/nave/shared/logging"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/settings"
	"github.com/navemesh/nave/shared/tlspin"
	"github.com/navemesh/nave/shared/xdsbootstrap"
)

// Program is the spoke binary's name, as its usage text and the config reference show it.
const Program = "nave-spoke"

// FilesScheme prefixes a source that is a directory of YAML files.
const FilesScheme = "fs://"

// KubernetesSource is the source value that watches a Kubernetes API server.
const KubernetesSource = "kubernetes"

const (
	minMessageBytes = 1024
	minFileBytes    = 1024
	maxLabelLength  = 63
)

// dnsLabel is a lowercase RFC 1123 label, without the length limit.
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)

// Config is the whole configuration of a spoke. Like its sections it is a plain value, filled
// once at start-up: copy it freely; do not change one that goroutines share.
type Config struct {
	Log     logging.Config `key:"log" help:"logging"`
	Admin   Admin          `key:"admin" help:"the admin HTTP server: health probes, metrics and debug views"`
	Source  string         `key:"source" default:"fs://examples" required:"true" help:"where the cluster's state is read from: kubernetes watches the cluster's API server (see kubernetes.*); fs://DIR watches a directory of YAML files"`
	Mesh    string         `key:"mesh" default:"default" required:"true" help:"mesh this cluster belongs to"`
	Cluster string         `key:"cluster" default:"cluster-1" required:"true" help:"name of this cluster, unique within its mesh"`
	// Network is the cluster's network (docs/multi-network.md).
	Network string `key:"network" help:"the network of this cluster's workloads (Istio's topology.istio.io/network): the network of every workload, WorkloadEntry and ServiceEntry endpoint the spoke reports without one (a WorkloadEntry's network field, a pod's or entry's topology.istio.io/network label, then its namespace's label win over it), and of the proxies the injector injects; empty: none (workloads without a network reach, and are reached by, every proxy directly)"`
	// DomainSuffix is the cluster's: the spoke sends it to the hub.
	DomainSuffix string     `key:"domainSuffix" default:"cluster.local" required:"true" help:"the cluster's DNS suffix: its service hostnames are name.namespace.svc.<domainSuffix> (the kubernetes source names services so), and the hub, which the spoke tells, completes the cluster's short host names in config (reviews in namespace shop: reviews.shop.svc.<domainSuffix>) with it"`
	Hub          Hub        `key:"hub" help:"the connection to the hub"`
	Files        Files      `key:"files" help:"the fs:// source"`
	Kube         Kubernetes `key:"kubernetes" help:"the kubernetes source"`
	RA           RA         `key:"ra" help:"the registration authority: workloads of this cluster obtain their certificates here with their service-account token (kubernetes source, TLS to the hub)"`
	Webhook      Webhook    `key:"webhook" help:"the admission webhooks (kubernetes source): the API server asks the spoke to validate the Istio kinds it reads, over HTTPS with a certificate the spoke issues and rotates itself (see docs/webhooks.md)"`
	Fallback     Fallback   `key:"fallback" help:"multi-primary fallback (docs/fallback.md): the spoke keeps the rest of its mesh from the hub (Watch, saved in hub.stateDir) and, when the hub is gone, serves xDS for its cluster's proxies itself"`
	Inject       Inject     `key:"inject" help:"the sidecar and proxyless injector, served at /inject of the webhook listener: pods of the selected namespaces get nave-agent (and Envoy with traffic capture, or the gRPC bootstrap) as docs/injection.md describes"`
	// GCPercent is the spoke's garbage collection target (decision 050).
	GCPercent int `key:"gcPercent" default:"50" help:"the Go garbage collector's target, as GOGC: the heap may grow this many percent over what is live before a collection; the spoke holds its cluster's state and allocates little once synced, so the default trades a little CPU at start for a third less peak memory (docs/decisions/050-spoke-memory.md). GOGC in the environment, when set, wins; 0: the Go default (100)"`
}

// Fallback configures the spoke's fallback xDS server.
type Fallback struct {
	Enabled       bool          `key:"enabled" default:"false" help:"keep the remote view (Watch) and serve xDS at listen when the hub is gone; proxies list this address second in their bootstrap"`
	Listen        string        `key:"listen" default:":15010" help:"host:port of the fallback xDS server (ADS, SotW and delta; mTLS with the cluster certificate unless hub.plaintext); it refuses streams (UNAVAILABLE) while the hub serves"`
	After         time.Duration `key:"after" default:"5s" help:"how long the hub must be gone (no synced stream) before the spoke serves xDS"`
	HandBackAfter time.Duration `key:"handBackAfter" default:"30s" help:"how long the hub must have been synced again (it ACKed the spoke's full state) before the spoke stops serving: hysteresis against a hub that comes and goes"`
	Drain         time.Duration `key:"drain" default:"10s" help:"at hand-back, the spoke closes its proxy streams one by one spread over this long, so they return to the hub gradually"`
	// ServerNames are what proxies verify the fallback server's
	// certificate against.
	ServerNames []string `key:"serverNames" help:"host names and IP addresses proxies dial the fallback server by (at most 4): the spoke asks the hub for a cluster certificate valid for them, which grpc-go's tls channel credentials require; empty: the host of inject.xdsFallbackAddress, if set"`
}

// FallbackServerNames are the names the cluster certificate must be valid
// for when fallback is on: fallback.serverNames, else the host of
// inject.xdsFallbackAddress; none when fallback is off.
func (c *Config) FallbackServerNames() []string {
	if !c.Fallback.Enabled {
		return nil
	}
	if len(c.Fallback.ServerNames) > 0 {
		return c.Fallback.ServerNames
	}
	if host, _, err := net.SplitHostPort(c.Inject.XDSFallbackAddress); err == nil && host != "" {
		return []string{host}
	}
	return nil
}

// Validate checks the address and the durations.
func (f *Fallback) Validate() error {
	if err := settings.CheckHostPort("listen", f.Listen); err != nil {
		return err
	}
	if f.After <= 0 {
		return settings.Invalid("after", "must be greater than 0, got %s", f.After)
	}
	if f.HandBackAfter < 0 {
		return settings.Invalid("handBackAfter", "must not be negative, got %s", f.HandBackAfter)
	}
	if f.Drain < 0 {
		return settings.Invalid("drain", "must not be negative, got %s", f.Drain)
	}
	if len(f.ServerNames) > 4 {
		return settings.Invalid("serverNames", "lists %d names; a cluster certificate carries at most 4", len(f.ServerNames))
	}
	for _, n := range f.ServerNames {
		if net.ParseIP(n) != nil {
			continue
		}
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
			return settings.Invalid("serverNames", "%q is neither an IP address nor a DNS name: %s", n, strings.Join(errs, "; "))
		}
	}
	return nil
}

// Inject configures the sidecar injector.
type Inject struct {
	Enabled       bool   `key:"enabled" default:"false" help:"serve the injector at /inject of webhook.listen (needs the kubernetes source, webhook.listen, TLS to the hub, proxyImage and xdsAddress); the MutatingWebhookConfiguration of deploy/spoke/injection.yaml sends it the pods to inject"`
	Revision      string `key:"revision" default:"default" help:"the istio.io/rev this spoke injects for: a pod labelled istio.io/rev with another value is left alone (the webhook configuration's selectors name the same revision)"`
	ProxyImage    string `key:"proxyImage" help:"image of the injected containers: it runs nave-agent (and holds Envoy and iptables-restore for the sidecar template); a pod's sidecar.istio.io/proxyImage annotation overrides it"`
	PullPolicy    string `key:"pullPolicy" help:"imagePullPolicy of the injected containers: Always, IfNotPresent or Never; empty: the cluster's default"`
	RAAddress     string `key:"raAddress" default:"nave-spoke-ra.nave-system.svc:15023" help:"host:port pods reach this spoke's registration authority at (ra.listen, behind the Service of deploy/spoke/injection.yaml)"`
	XDSAddress    string `key:"xdsAddress" help:"host:port pods reach the hub's xDS listener at; required with enabled"`
	XDSServerName string `key:"xdsServerName" help:"name the hub's xDS serving certificate must be valid for; empty: the host of xdsAddress"`
	// XDSFallbackAddress is the spoke's fallback xDS server as pods reach it.
	XDSFallbackAddress string `key:"xdsFallbackAddress" help:"host:port pods reach this spoke's fallback xDS server at (fallback.listen, docs/fallback.md): the agent lists it second in every bootstrap; empty: none"`
	// XDSReplicas are the hub's replicas as pods reach each one.
	XDSReplicas []string `key:"xdsReplicas" help:"the hub's replicas as NAME=HOST:PORT (its replicas.id, and an address reaching that replica alone), given to every injected agent as xds.replicas: each pod's bootstrap lists its namespace's home replica first, so each namespace's proxy config is generated by one replica (docs/decisions/051-replicas-and-generation.md); empty: xdsAddress alone"`
	// RewriteAppProbes is Istio's global rewriteAppHTTPProbe.
	RewriteAppProbes bool `key:"rewriteAppProbes" default:"true" help:"rewrite the app containers' httpGet, grpc and tcpSocket probes to nave-agent, which probes the app from inside the pod, so that they pass under STRICT mTLS (docs/injection.md); a pod's sidecar.istio.io/rewriteAppHTTPProbers annotation overrides it"`
}

// Validate checks the addresses, the revision and the pull policy.
func (i *Inject) Validate() error {
	if i.Enabled && i.ProxyImage == "" {
		return settings.Invalid("proxyImage", "is required with enabled")
	}
	if i.Enabled && i.XDSAddress == "" {
		return settings.Invalid("xdsAddress", "is required with enabled: the hub's xDS listener as pods reach it")
	}
	if i.XDSAddress != "" {
		if err := settings.CheckHostPort("xdsAddress", i.XDSAddress); err != nil {
			return err
		}
	}
	if i.XDSFallbackAddress != "" {
		if err := settings.CheckHostPort("xdsFallbackAddress", i.XDSFallbackAddress); err != nil {
			return err
		}
	}
	for _, r := range i.XDSReplicas {
		if _, err := xdsbootstrap.ParseReplica(r); err != nil {
			return settings.Invalid("xdsReplicas", "%v", err)
		}
	}
	if err := settings.CheckHostPort("raAddress", i.RAAddress); err != nil {
		return err
	}
	if len(validation.IsValidLabelValue(i.Revision)) > 0 || i.Revision == "" {
		return settings.Invalid("revision", "%q is not a label value", i.Revision)
	}
	switch i.PullPolicy {
	case "", "Always", "IfNotPresent", "Never":
	default:
		return settings.Invalid("pullPolicy", "%q: want Always, IfNotPresent or Never (or empty)", i.PullPolicy)
	}
	if host, _, err := net.SplitHostPort(i.XDSServerName); err == nil {
		return settings.Invalid("xdsServerName", "%q is host:port; want the name alone (%q)", i.XDSServerName, host)
	}
	return nil
}

// RA configures the registration authority.
type RA struct {
	Listen    string   `key:"listen" default:"127.0.0.1:15023" help:"host:port the registration authority (Istio's CA API, TLS with the spoke's cluster certificate) listens on; empty: none. Runs only with the kubernetes source and TLS to the hub"`
	Audiences []string `key:"audiences" default:"istio-ca" help:"a workload's service-account token must be valid for one of these audiences (checked with a TokenReview)"`
}

// Validate checks the listen address and the audiences.
func (r *RA) Validate() error {
	if r.Listen != "" {
		if err := settings.CheckHostPort("listen", r.Listen); err != nil {
			return err
		}
	}
	if len(r.Audiences) == 0 {
		return settings.Invalid("audiences", "must name at least one audience")
	}
	return nil
}

// IsKubernetes reports whether the source is the Kubernetes API server.
func (c *Config) IsKubernetes() bool { return c.Source == KubernetesSource }

// SourcePath is the directory of an fs:// source; call it on a validated Config.
func (c *Config) SourcePath() string {
	return strings.TrimPrefix(c.Source, FilesScheme)
}

// Validate checks the source and the mesh and cluster names.
func (c *Config) Validate() error {
	if c.GCPercent < 0 {
		return settings.Invalid("gcPercent", "must be 0 (the Go default) or more, got %d", c.GCPercent)
	}
	if c.IsKubernetes() {
		if c.Inject.Enabled && c.Webhook.Listen == "" {
			return settings.Invalid("inject.enabled", "the injector is served on the webhook listener: set webhook.listen")
		}
		if c.Inject.Enabled && c.Hub.Plaintext {
			return settings.Invalid("inject.enabled", "injected pods get their certificates through the registration authority, which needs TLS to the hub: unset hub.plaintext")
		}
		return c.validateNames()
	}
	if c.Inject.Enabled {
		return settings.Invalid("inject.enabled", "the injector needs source %q; unset it with source %s", KubernetesSource, c.Source)
	}
	if c.Hub.CredentialsSecret != "" && !c.Hub.Plaintext {
		return settings.Invalid("hub.credentialsSecret", "a Secret needs source %q (the cluster's API server); with source %s keep the credentials in hub.stateDir", KubernetesSource, c.Source)
	}
	if c.Webhook.Listen != "" {
		return settings.Invalid("webhook.listen", "the webhooks need source %q (their certificate authority lives in the cluster); set it empty with source %s", KubernetesSource, c.Source)
	}
	if !strings.HasPrefix(c.Source, FilesScheme) {
		return settings.Invalid("source", "unsupported source %q: want %q or %sDIR", c.Source, KubernetesSource, FilesScheme)
	}
	if c.SourcePath() == "" {
		return settings.Invalid("source", "%q names no directory: want %sDIR", c.Source, FilesScheme)
	}
	return c.validateNames()
}

func (c *Config) validateNames() error {
	if err := checkLabel("mesh", c.Mesh); err != nil {
		return err
	}
	if c.Network != "" && len(validation.IsValidLabelValue(c.Network)) > 0 {
		return settings.Invalid("network", "%q is not a label value (it is what topology.istio.io/network says): letters, digits, '-', '_' and '.', at most 63 characters, starting and ending with a letter or digit", c.Network)
	}
	if err := meshconfig.CheckDomainSuffix(c.DomainSuffix); err != nil {
		return settings.Invalid("domainSuffix", "%v", err)
	}
	return checkLabel("cluster", c.Cluster)
}

func checkLabel(field, value string) error {
	if len(value) > maxLabelLength || !dnsLabel.MatchString(value) {
		return settings.Invalid(field, "%q is not a DNS label: lowercase letters, digits and '-', starting and ending with a letter or digit, at most %d characters", value, maxLabelLength)
	}
	return nil
}

// Admin configures the admin HTTP server.
type Admin struct {
	Listen string `key:"listen" default:"127.0.0.1:15024" help:"host:port the admin HTTP server (metrics, health, debug) listens on"`
}

// Validate checks the listen address.
func (a *Admin) Validate() error { return settings.CheckHostPort("listen", a.Listen) }

// Hub modes: who dials whom for the spoke's state.
const (
	ModePush   = "push"
	ModePolled = "polled"
)

// Hub configures the spoke's connection to the hub.
type Hub struct {
	Address           string        `key:"address" default:"127.0.0.1:15012" help:"host:port of the hub's sync service"`
	BackoffInitial    time.Duration `key:"backoffInitial" default:"250ms" help:"wait before the first reconnect to the hub, drawn from 50-150 % of this value; each further wait is 1.5 times the previous one (same jitter), up to backoffMax; the waits start over once a stream has synced"`
	BackoffMax        time.Duration `key:"backoffMax" default:"15s" help:"longest wait between reconnects to the hub, jitter included; every attempt dials anew, so a hub that is back is reached at most this long after (plus the dial)"`
	MaxMessageBytes   int           `key:"maxMessageBytes" default:"16777216" help:"largest gRPC message sent to or accepted from the hub, in bytes"`
	Plaintext         bool          `key:"plaintext" default:"false" help:"INSECURE, for tests and development only: connect without TLS and claim mesh and cluster in gRPC metadata (the hub must run with --tls.plaintext); tokenFile, caHash, caFile, stateDir and serverName are then ignored"`
	TokenFile         string        `key:"tokenFile" help:"file holding the one-time join token (navectl token create), e.g. a mounted Secret (surrounding white space is ignored); read only when stateDir holds no credentials"`
	CAHash            string        `key:"caHash" help:"pin of the hub's serving CA, sha256:HEX as printed by navectl ca-hash; this or caFile is needed for the first enrollment"`
	CAFile            string        `key:"caFile" help:"PEM file of the hub's serving CA; this or caHash is needed for the first enrollment"`
	StateDir          string        `key:"stateDir" default:"nave-spoke-state" help:"directory where the spoke keeps its cluster certificate, key and the hub's CA (created 0700) unless credentialsSecret is set, and the remote view (fallback); it enrolls when its credentials store holds none"`
	CredentialsSecret string        `key:"credentialsSecret" help:"keep the cluster certificate, key and the hub's CA in this Kubernetes Secret, <namespace>/<name> (kubernetes source; RBAC: get and update on the name, create in the namespace) instead of stateDir, so that no volume has to outlive the pod; empty: stateDir"`
	ServerName        string        `key:"serverName" help:"name the hub's serving certificate must be valid for; empty: the host of address"`
	Mode              string        `key:"mode" default:"push" help:"push: the spoke dials the hub at address and pushes its state; polled: the spoke dials nothing for its state — it listens on pollListen and the hub, which lists it in spokes.poll, dials it (mTLS: the spoke serves its cluster certificate and requires the hub's). Enrollment and certificate renewal still call the hub at address (docs/protocol.md, Polled mode); with fallback.enabled the hub also opens the Watch stream (PollWatch) to keep the remote view"`
	PollListen        string        `key:"pollListen" default:"0.0.0.0:15026" help:"with mode polled, host:port the spoke serves the hub's Poll stream on (the address in the hub's spokes.poll)"`
}

// Validate checks the address, the backoff bounds, the message size limit and the TLS
// settings. It normalizes caHash to lowercase.
func (h *Hub) Validate() error {
	if err := settings.CheckHostPort("address", h.Address); err != nil {
		return err
	}
	if h.BackoffInitial <= 0 {
		return settings.Invalid("backoffInitial", "must be greater than 0, got %s", h.BackoffInitial)
	}
	if h.BackoffMax < h.BackoffInitial {
		return settings.Invalid("backoffMax", "must be at least backoffInitial (%s), got %s", h.BackoffInitial, h.BackoffMax)
	}
	if h.MaxMessageBytes < minMessageBytes {
		return settings.Invalid("maxMessageBytes", "must be at least %d, got %d", minMessageBytes, h.MaxMessageBytes)
	}
	switch h.Mode {
	case ModePush:
	case ModePolled:
		if err := settings.CheckHostPort("pollListen", h.PollListen); err != nil {
			return err
		}
	default:
		return settings.Invalid("mode", "must be %s or %s, got %q", ModePush, ModePolled, h.Mode)
	}
	return h.validateTLS()
}

// CredentialsSecretName splits credentialsSecret into namespace and name.
func (h *Hub) CredentialsSecretName() (namespace, name string, err error) {
	ns, n, ok := strings.Cut(h.CredentialsSecret, "/")
	if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(n)) > 0 {
		return "", "", settings.Invalid("credentialsSecret", "%q is not <namespace>/<name> of a Secret", h.CredentialsSecret)
	}
	return ns, n, nil
}

// validateTLS checks the form of the TLS settings. Whether they suffice (a token and a way to
// trust the hub, needed only when stateDir holds no credentials) is known only at start-up.
func (h *Hub) validateTLS() error {
	if h.Plaintext {
		return nil
	}
	if h.StateDir == "" {
		return settings.Invalid("stateDir", "is required unless plaintext is set")
	}
	if h.CredentialsSecret != "" {
		if _, _, err := h.CredentialsSecretName(); err != nil {
			return err
		}
	}
	if h.CAHash != "" {
		pin, err := tlspin.Parse(h.CAHash)
		if err != nil {
			return settings.Invalid("caHash", "%q is not a CA hash: want sha256:<64 hex digits>, as printed by navectl ca-hash", h.CAHash)
		}
		h.CAHash = pin
		if h.CAFile != "" {
			return settings.Invalid("caFile", "set caHash or caFile, not both")
		}
	}
	if host, _, err := net.SplitHostPort(h.ServerName); err == nil {
		return settings.Invalid("serverName", "%q is host:port; want the name alone (%q)", h.ServerName, host)
	}
	return nil
}

// Files configures the fs:// source.
type Files struct {
	Debounce     time.Duration `key:"debounce" default:"100ms" help:"re-read the directory once no file has changed for this long"`
	DebounceEdge debounce.Edge `key:"debounceEdge" default:"leading" help:"leading: the first change after debounce without changes is re-read at once (withdrawals still wait for their file to settle), the changes that follow within debounce together after it; trailing: every change waits until no file has changed for debounce"`
	MaxFileBytes int64         `key:"maxFileBytes" default:"4194304" help:"largest YAML file read, in bytes; larger files are refused"`
}

// Validate checks the debounce, its edge and the file size limit.
func (f *Files) Validate() error {
	if f.Debounce <= 0 {
		return settings.Invalid("debounce", "must be greater than 0, got %s", f.Debounce)
	}
	if err := f.DebounceEdge.Validate(); err != nil {
		return settings.Invalid("debounceEdge", "%v", err)
	}
	if f.MaxFileBytes < minFileBytes {
		return settings.Invalid("maxFileBytes", "must be at least %d, got %d", minFileBytes, f.MaxFileBytes)
	}
	return nil
}

// Kubernetes configures the kubernetes source.
type Kubernetes struct {
	Kubeconfig        string        `key:"kubeconfig" help:"kubeconfig file to reach the API server; empty: in-cluster credentials, else $KUBECONFIG"`
	NamespaceSelector string        `key:"namespaceSelector" help:"label selector of the namespaces watched (like Istio's discoverySelectors); empty: every namespace"`
	Debounce          time.Duration `key:"debounce" default:"100ms" help:"after the initial sync, changes are pushed once none has arrived for this long"`
	DebounceEdge      debounce.Edge `key:"debounceEdge" default:"leading" help:"leading: the first change after debounce without changes is pushed at once, the changes that follow within debounce together after it; trailing: every change waits until none has arrived for debounce"`
	CRDPoll           time.Duration `key:"crdPoll" default:"30s" help:"how often to look again for Istio CRDs that were not installed"`
}

// Validate checks the durations and the edge.
func (k *Kubernetes) Validate() error {
	if k.Debounce <= 0 {
		return settings.Invalid("debounce", "must be greater than 0, got %s", k.Debounce)
	}
	if err := k.DebounceEdge.Validate(); err != nil {
		return settings.Invalid("debounceEdge", "%v", err)
	}
	if k.CRDPoll <= 0 {
		return settings.Invalid("crdPoll", "must be greater than 0, got %s", k.CRDPoll)
	}
	return nil
}

// Webhook configures the admission webhook server and its certificates.
type Webhook struct {
	Listen                  string        `key:"listen" help:"host:port the admission webhook server (HTTPS, AdmissionReview v1; validation at /validate, injection at /inject with inject.enabled) listens on, e.g. 0.0.0.0:15017 behind the Service of deploy/spoke/webhook.yaml; empty: no webhooks. Needs the kubernetes source"`
	Hosts                   []string      `key:"hosts" default:"nave-spoke.nave-system.svc" help:"DNS names and IP addresses the serving certificate is valid for: the name the API server calls (<service>.<namespace>.svc), or the address of a clientConfig.url"`
	Namespace               string        `key:"namespace" default:"nave-system" help:"the spoke's namespace, where its webhook CA Secret lives"`
	CASecret                string        `key:"caSecret" default:"nave-spoke-webhook-ca" help:"Secret holding the webhook CA: created by the first spoke replica, shared and rotated by all (RBAC: get, list, watch, update on this name; create)"`
	ValidatingConfiguration string        `key:"validatingConfiguration" default:"nave-spoke-validation" help:"ValidatingWebhookConfiguration whose caBundle the spoke keeps current (RBAC: get, list, watch, update on this name); empty: none"`
	MutatingConfiguration   string        `key:"mutatingConfiguration" default:"nave-spoke-injection" help:"MutatingWebhookConfiguration (the injector's) whose caBundle the spoke keeps current (RBAC: get, list, watch, update on this name); empty: none"`
	CertValidity            time.Duration `key:"certValidity" default:"24h" help:"validity of a serving certificate; each replica renews its own half way"`
	CAValidity              time.Duration `key:"caValidity" default:"87600h" help:"validity of a webhook CA; a successor is made half way, trusted at once and signing a fifth of its validity later; the old one stays trusted until it expires. At least 4 times certValidity"`
	MaxRequestBytes         int64         `key:"maxRequestBytes" default:"8388608" help:"largest AdmissionReview body accepted, in bytes; a larger one is refused with 413"`
}

// minRequestBytes is the smallest webhook.maxRequestBytes (spoke/admission's MinMaxRequestBytes).
const minRequestBytes = 64 << 10

// Validate checks the listen address, the certificate's names and the
// Kubernetes names, the validities and the body limit.
func (w *Webhook) Validate() error {
	if w.Listen != "" {
		if err := settings.CheckHostPort("listen", w.Listen); err != nil {
			return err
		}
	}
	if len(w.Hosts) == 0 {
		return settings.Invalid("hosts", "must name at least one DNS name or IP address")
	}
	for _, h := range w.Hosts {
		if net.ParseIP(h) == nil && len(validation.IsDNS1123Subdomain(h)) > 0 {
			return settings.Invalid("hosts", "%q is neither an IP address nor a lowercase DNS name", h)
		}
	}
	if len(validation.IsDNS1123Label(w.Namespace)) > 0 {
		return settings.Invalid("namespace", "%q is not a namespace name (a DNS label)", w.Namespace)
	}
	if len(validation.IsDNS1123Subdomain(w.CASecret)) > 0 {
		return settings.Invalid("caSecret", "%q is not a Secret name (a DNS subdomain)", w.CASecret)
	}
	if w.ValidatingConfiguration != "" && len(validation.IsDNS1123Subdomain(w.ValidatingConfiguration)) > 0 {
		return settings.Invalid("validatingConfiguration", "%q is not an object name (a DNS subdomain)", w.ValidatingConfiguration)
	}
	if w.MutatingConfiguration != "" && len(validation.IsDNS1123Subdomain(w.MutatingConfiguration)) > 0 {
		return settings.Invalid("mutatingConfiguration", "%q is not an object name (a DNS subdomain)", w.MutatingConfiguration)
	}
	if w.CertValidity < time.Second {
		return settings.Invalid("certValidity", "must be at least 1s, got %s", w.CertValidity)
	}
	if w.CAValidity < 4*w.CertValidity {
		return settings.Invalid("caValidity", "must be at least 4 times certValidity (%s), got %s", 4*w.CertValidity, w.CAValidity)
	}
	if w.MaxRequestBytes < minRequestBytes {
		return settings.Invalid("maxRequestBytes", "must be at least %d, got %d", minRequestBytes, w.MaxRequestBytes)
	}
	return nil
}
