// Package agentconfig is the configuration of the nave-agent binary, the
// per-pod agent (docs/agent.md), loaded by settings.Load and documented in
// docs/config.md. The injection templates set these keys on the agent
// container as NAVE_* environment variables (the contract in docs/agent.md).
package agentconfig

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/navemesh/nave/shared/logging"
	"github.com/navemesh/nave/shared/settings"
	"github.com/navemesh/nave/shared/spiffeid"
	"github.com/navemesh/nave/shared/xdsbootstrap"
	"github.com/navemesh/nave/spoke/appprobe"
)

// Program is the agent binary's name.
const Program = "nave-agent"

// Modes of the agent.
const (
	// ModeEnvoy serves SDS to an Envoy sidecar and writes its bootstrap.
	ModeEnvoy = "envoy"
	// ModeGRPC writes grpc's file_watcher files and its xDS bootstrap for
	// proxyless gRPC applications.
	ModeGRPC = "grpc"
)

// Proxy types of an envoy-mode agent: the TYPE of its Envoy's node id.
const (
	// ProxySidecar is an Envoy next to the pod's application, its
	// traffic captured (the sidecar template).
	ProxySidecar = xdsbootstrap.ProxySidecar
	// ProxyRouter is an Envoy that is the pod's application: a gateway
	// (the gateway template), given the listeners of the Gateways whose
	// selector matches the pod's labels.
	ProxyRouter = xdsbootstrap.ProxyRouter
)

// Config is the whole configuration of an agent. A plain value, filled once
// at start-up: copy it freely; do not change one that goroutines share.
type Config struct {
	Log  logging.Config `key:"log" help:"logging"`
	Mode string         `key:"mode" default:"envoy" required:"true" help:"envoy: serve SDS to an Envoy sidecar over dir/sds.sock, write dir/envoy-bootstrap.json and run Envoy (envoy.binary) as a child; grpc: write grpc's certificate files and dir/grpc-bootstrap.json for proxyless gRPC applications"`
	// ProxyType is the TYPE of the Envoy node id (envoy mode).
	ProxyType string `key:"proxyType" default:"sidecar" required:"true" help:"envoy mode: sidecar (an Envoy beside the pod's application, its traffic captured) or router (the pod is a gateway: the hub gives its Envoy the listeners of the Gateways selecting the pod's labels); the TYPE of the node id TYPE~IP~POD.NS~NS.svc.<domainSuffix>; grpc mode: sidecar only"`
	Mesh      string `key:"mesh" default:"default" required:"true" help:"mesh the workload belongs to (node metadata MESH)"`
	Cluster   string `key:"cluster" required:"true" help:"cluster the pod runs in (node metadata CLUSTER_ID)"`
	// Network is the pod's network (docs/multi-network.md).
	Network     string `key:"network" help:"network the pod is on (node metadata NETWORK, Istio's ISTIO_META_NETWORK): the hub gives the proxy the endpoints of its network directly and those of other networks through their east-west gateways; the injector sets it from the pod's topology.istio.io/network label, its namespace's, else the spoke's network; empty: none"`
	TrustDomain string `key:"trustDomain" default:"cluster.local" required:"true" help:"the mesh's trust domain: the workload's identity is spiffe://<trustDomain>/ns/<pod.namespace>/sa/<pod.serviceAccount>"`
	// DomainSuffix completes the node id's DNS domain.
	DomainSuffix string `key:"domainSuffix" default:"cluster.local" required:"true" help:"the cluster's DNS suffix, for the Envoy node id (TYPE~IP~POD.NS~NS.svc.<domainSuffix>, TYPE the proxyType)"`
	Pod          Pod    `key:"pod" help:"the pod the agent runs in, from the downward API"`
	RA           RA     `key:"ra" help:"the spoke's registration authority, which issues the workload certificate"`
	Trust        Trust  `key:"trust" help:"roots of trust (PEM text)"`
	XDS          XDS    `key:"xds" help:"the xDS servers the bootstraps name"`
	Dir          string `key:"dir" default:"/var/run/nave" required:"true" help:"directory (an in-memory emptyDir shared with Envoy or the applications) for sds.sock, the certificate files (grpc mode) and the bootstraps"`
	Status       Status `key:"status" help:"the status HTTP server: health probes, metrics and debug views"`
	Envoy        Envoy  `key:"envoy" help:"the Envoy sidecar (envoy mode)"`
	DNS          DNS    `key:"dns" help:"the DNS proxy, which answers the mesh's names in the pod (envoy mode, sidecar, proxyMetadata ISTIO_META_DNS_CAPTURE \"true\"; docs/dns.md)"`
	ProxyUID     int    `key:"proxyUID" default:"1337" help:"uid the sidecar runs as (traffic capture excludes it); informational for the agent"`
	// AppProbes are the app containers' original probes (decision 032).
	AppProbes string `key:"appProbes" help:"JSON of the app containers' original probes by path (/app-health/<container>/livez|readyz|startupz: httpGet, grpc or tcpSocket with numeric ports, timeoutSeconds), which the injector rewrote to httpGet on the status port; the agent answers each path by probing the pod; empty: none"`
	// ProxyMetadata is ProxyConfig's proxyMetadata (JSON).
	ProxyMetadata string `key:"proxyMetadata" help:"JSON object of ProxyConfig's proxyMetadata (name: value), which the injector also sets as environment variables of the agent (and so of Envoy); entries named ISTIO_META_<NAME> become node metadata <NAME> in the bootstrap, as in Istio, never replacing what the agent sets itself; empty: none"`
}

// DNS configures the DNS proxy (spoke/agent/dnsproxy, docs/dns.md).
type DNS struct {
	Address         string        `key:"address" default:"localhost:15053" help:"host:port the DNS proxy answers on (UDP and TCP) when it runs: envoy mode, proxyType sidecar, proxyMetadata ISTIO_META_DNS_CAPTURE \"true\" (the capture then redirects the pod's port 53 traffic there); host localhost means 127.0.0.1 and, when resolvConf names an IPv6 resolver, ::1 too (Istio's DNS_PROXY_ADDR)"`
	ResolvConf      string        `key:"resolvConf" default:"/etc/resolv.conf" help:"the pod's resolver configuration: its nameservers are the upstreams names not in the name table are forwarded to, its search domains the completions the proxy recognises"`
	UpstreamTimeout time.Duration `key:"upstreamTimeout" default:"5s" help:"how long the DNS proxy waits for one upstream resolver before trying the next (then SERVFAIL)"`
}

// Validate checks the address and the timeout.
func (d *DNS) Validate() error {
	if err := settings.CheckHostPort("address", d.Address); err != nil {
		return err
	}
	if d.UpstreamTimeout <= 0 {
		return settings.Invalid("upstreamTimeout", "must be greater than 0, got %s", d.UpstreamTimeout)
	}
	return nil
}

// Pod is what the downward API tells about the pod.
type Pod struct {
	Name            string `key:"name" required:"true" help:"the pod's name (fieldRef metadata.name)"`
	Namespace       string `key:"namespace" required:"true" help:"the pod's namespace (fieldRef metadata.namespace)"`
	ServiceAccount  string `key:"serviceAccount" default:"default" required:"true" help:"the pod's service account (fieldRef spec.serviceAccountName)"`
	IP              string `key:"ip" help:"the pod's IP (fieldRef status.podIP); empty: none is announced"`
	Node            string `key:"node" help:"the node the pod runs on (fieldRef spec.nodeName)"`
	LabelsFile      string `key:"labelsFile" default:"/etc/nave/pod/labels" help:"downward API file of the pod's labels (key=\"value\" lines); a missing file means no labels"`
	AnnotationsFile string `key:"annotationsFile" default:"/etc/nave/pod/annotations" help:"downward API file of the pod's annotations; a missing file means none"`
}

// RA configures how the agent reaches the registration authority.
type RA struct {
	Address   string        `key:"address" required:"true" help:"host:port of the spoke's registration authority (Istio's CA API over TLS)"`
	Identity  string        `key:"identity" required:"true" help:"SPIFFE ID the registration authority's certificate must carry: spiffe://<trustDomain>/nave/cluster/<cluster>"`
	TokenFile string        `key:"tokenFile" default:"/var/run/secrets/tokens/istio-token" help:"projected service-account token (audience istio-ca), re-read for every request"`
	CertTTL   time.Duration `key:"certTTL" default:"24h" help:"lifetime asked for the workload certificate (the CA may shorten it)"`
	Timeout   time.Duration `key:"timeout" default:"10s" help:"deadline of one certificate request"`
	// RenewFraction is where in a certificate's life renewal starts.
	RenewFraction float64       `key:"renewFraction" default:"0.5" help:"renewal starts at this fraction of the certificate's lifetime plus up to renewJitter more (0.5 and 0.3: between 50 and 80 %)"`
	RenewJitter   float64       `key:"renewJitter" default:"0.3" help:"random share of the lifetime added to renewFraction, so that pods do not renew together"`
	RetryInitial  time.Duration `key:"retryInitial" default:"1s" help:"wait before retrying a failed certificate request; doubled each time (with jitter) up to retryMax"`
	RetryMax      time.Duration `key:"retryMax" default:"30s" help:"longest wait between retries of a failed certificate request"`
	RootsRefresh  time.Duration `key:"rootsRefresh" default:"1h" help:"longest wait between certificate requests: each answer carries the mesh's current roots, which the agent then trusts and hands to the workload (SDS ROOTCA, grpc's root-cert.pem), so a root rotation (navectl roots) reaches running pods within this; 0: only at renewal"`
}

// Trust holds the roots of trust.
type Trust struct {
	MeshRoots string `key:"meshRoots" required:"true" help:"PEM text of the mesh's roots: the registration authority and every workload certificate chain to them"`
	HubCA     string `key:"hubCA" required:"true" help:"PEM text of the hub's serving CA, which the hub's xDS certificate chains to"`
}

// XDS names the xDS servers.
type XDS struct {
	Address         string `key:"address" required:"true" help:"host:port of the hub's xDS listener"`
	FallbackAddress string `key:"fallbackAddress" help:"host:port of a second xDS server (the spoke's, in fallback), listed second in every bootstrap; the grpc bootstrap's CA file then holds the mesh roots besides the hub's CA (docs/fallback.md); empty: none"`
	ServerName      string `key:"serverName" help:"name the hub's serving certificate must be valid for; empty: the host of address"`
	// Replicas are the hub's replicas, each reachable on its own.
	Replicas []string `key:"replicas" help:"the hub's replicas as NAME=HOST:PORT, each address reaching that replica alone (a StatefulSet pod's name and DNS name): every bootstrap lists them first, the pod's namespace's home replica first and the others in the order to fail over in, then address, then fallbackAddress, so that each namespace's proxies are served, and their config generated, by one replica (docs/decisions/051-replicas-and-generation.md); their certificates must be valid for serverName. Empty: address alone"`
}

// Status configures the status server.
type Status struct {
	Listen string `key:"listen" default:":15021" help:"host:port of /healthz/ready (certificate obtained, bootstrap written, Envoy ready when it runs), /healthz/live, /metrics and /debug/"`
}

// Envoy configures the Envoy child.
type Envoy struct {
	Binary    string `key:"binary" default:"/usr/local/bin/envoy" help:"Envoy binary, run as the agent's child with -c dir/envoy-bootstrap.json when it exists (envoy mode)"`
	AdminPort int    `key:"adminPort" default:"15000" help:"port of Envoy's admin server, on 127.0.0.1"`
	// ReadyPort is Envoy's own readiness listener.
	ReadyPort int `key:"readyPort" default:"15020" help:"port of the readiness listener in Envoy's bootstrap (127.0.0.1), answering /ready from Envoy's admin"`
	// DrainDuration is ProxyConfig's terminationDrainDuration.
	DrainDuration time.Duration `key:"drainDuration" default:"5s" help:"when the agent is stopped (SIGTERM), how long Envoy drains before it is stopped: the agent asks Envoy's admin to drain its listeners gracefully (POST /drain_listeners?graceful, Envoy started with its drain-time-s flag at this duration and drain-strategy immediate) and waits this long or until Envoy has no connection left; 0: stop Envoy at once. Istio's terminationDrainDuration (ProxyConfig), which the injector sets from the mesh's defaultConfig and the pod's proxy.istio.io/config"`
}

// Validate checks the section.
func (p *Pod) Validate() error {
	if err := spiffeid.ValidateName(p.Namespace); err != nil {
		return settings.Invalid("namespace", "%q: %v", p.Namespace, err)
	}
	if p.IP != "" && net.ParseIP(p.IP) == nil {
		return settings.Invalid("ip", "%q is not an IP address", p.IP)
	}
	return nil
}

// Validate checks the address, identity, durations and fractions.
func (r *RA) Validate() error {
	if err := settings.CheckHostPort("address", r.Address); err != nil {
		return err
	}
	if _, err := spiffeid.ParseClusterID(r.Identity); err != nil {
		return settings.Invalid("identity", "%q: %v (want spiffe://<trustDomain>/nave/cluster/<cluster>)", r.Identity, err)
	}
	if r.TokenFile == "" {
		return settings.Invalid("tokenFile", "must name the projected service-account token")
	}
	if r.CertTTL < time.Second {
		return settings.Invalid("certTTL", "must be at least 1s, got %s", r.CertTTL)
	}
	if r.Timeout <= 0 {
		return settings.Invalid("timeout", "must be greater than 0, got %s", r.Timeout)
	}
	if r.RenewFraction <= 0 || r.RenewJitter < 0 || r.RenewFraction+r.RenewJitter >= 1 {
		return settings.Invalid("renewFraction", "renewFraction (%g) must be above 0, renewJitter (%g) at least 0, and their sum below 1", r.RenewFraction, r.RenewJitter)
	}
	if r.RetryInitial <= 0 {
		return settings.Invalid("retryInitial", "must be greater than 0, got %s", r.RetryInitial)
	}
	if r.RootsRefresh != 0 && r.RootsRefresh < time.Second {
		return settings.Invalid("rootsRefresh", "must be 0 or at least 1s, got %s", r.RootsRefresh)
	}
	if r.RetryMax < r.RetryInitial {
		return settings.Invalid("retryMax", "must be at least retryInitial (%s), got %s", r.RetryInitial, r.RetryMax)
	}
	return nil
}

// Validate checks that both hold PEM certificates.
func (t *Trust) Validate() error {
	if _, err := ParseCertificates(t.MeshRoots); err != nil {
		return settings.Invalid("meshRoots", "%v", err)
	}
	if _, err := ParseCertificates(t.HubCA); err != nil {
		return settings.Invalid("hubCA", "%v", err)
	}
	return nil
}

// ParseCertificates parses PEM text holding one or more certificates and
// nothing else.
func ParseCertificates(text string) ([]*x509.Certificate, error) {
	rest := []byte(text)
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("holds a PEM %q block; want only CERTIFICATE blocks", b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %v", len(out)+1, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("holds no PEM certificate")
	}
	return out, nil
}

// Validate checks the addresses and the server name.
func (x *XDS) Validate() error {
	if err := settings.CheckHostPort("address", x.Address); err != nil {
		return err
	}
	if x.FallbackAddress != "" {
		if err := settings.CheckHostPort("fallbackAddress", x.FallbackAddress); err != nil {
			return err
		}
	}
	if _, _, err := net.SplitHostPort(x.ServerName); err == nil {
		return settings.Invalid("serverName", "%q is host:port; want the name alone", x.ServerName)
	}
	if _, err := x.ParsedReplicas(); err != nil {
		return settings.Invalid("replicas", "%v", err)
	}
	return nil
}

// ParsedReplicas returns Replicas parsed, in their order; an error names
// an entry that is not NAME=HOST:PORT or a name given twice.
func (x XDS) ParsedReplicas() ([]xdsbootstrap.Replica, error) {
	var out []xdsbootstrap.Replica
	seen := map[string]bool{}
	for _, s := range x.Replicas {
		r, err := xdsbootstrap.ParseReplica(s)
		if err != nil {
			return nil, err
		}
		if seen[r.Name] {
			return nil, fmt.Errorf("replica %q is named twice", r.Name)
		}
		seen[r.Name] = true
		out = append(out, r)
	}
	return out, nil
}

// Host is the name the hub's certificate must be valid for.
func (x XDS) Host() string {
	if x.ServerName != "" {
		return x.ServerName
	}
	host, _, _ := net.SplitHostPort(x.Address)
	return host
}

// Validate checks the listen address.
func (s *Status) Validate() error { return settings.CheckHostPort("listen", s.Listen) }

// Validate checks the ports.
func (e *Envoy) Validate() error {
	for _, p := range []struct {
		key  string
		port int
	}{{"adminPort", e.AdminPort}, {"readyPort", e.ReadyPort}} {
		if p.port < 1 || p.port > 65535 {
			return settings.Invalid(p.key, "must be a port number 1-65535, got %d", p.port)
		}
	}
	if e.AdminPort == e.ReadyPort {
		return settings.Invalid("readyPort", "must differ from adminPort (%d)", e.AdminPort)
	}
	if e.DrainDuration < 0 {
		return settings.Invalid("drainDuration", "must not be negative, got %s", e.DrainDuration)
	}
	return nil
}

// Validate checks the mode, the trust domain and that the RA's identity is
// of the same trust domain.
func (c *Config) Validate() error {
	if c.Mode != ModeEnvoy && c.Mode != ModeGRPC {
		return settings.Invalid("mode", "must be %s or %s, got %q", ModeEnvoy, ModeGRPC, c.Mode)
	}
	if c.ProxyType != ProxySidecar && c.ProxyType != ProxyRouter {
		return settings.Invalid("proxyType", "must be %s or %s, got %q", ProxySidecar, ProxyRouter, c.ProxyType)
	}
	if c.Mode == ModeGRPC && c.ProxyType != ProxySidecar {
		return settings.Invalid("proxyType", "%s is an Envoy gateway's; mode %s has no Envoy", c.ProxyType, ModeGRPC)
	}
	if err := spiffeid.ValidateTrustDomain(c.TrustDomain); err != nil {
		return settings.Invalid("trustDomain", "%q: %v", c.TrustDomain, err)
	}
	if id, err := spiffeid.ParseClusterID(c.RA.Identity); err == nil && id.TrustDomain != c.TrustDomain {
		return settings.Invalid("ra.identity", "%q is of trust domain %q, not trustDomain %q", c.RA.Identity, id.TrustDomain, c.TrustDomain)
	}
	if _, err := c.WorkloadID(); err != nil {
		return settings.Invalid("pod.serviceAccount", "%q makes no workload identity: %v", c.Pod.ServiceAccount, err)
	}
	if _, err := appprobe.Parse(c.AppProbes); err != nil {
		return settings.Invalid("appProbes", "%v", err)
	}
	if _, err := c.ProxyMetadataMap(); err != nil {
		return settings.Invalid("proxyMetadata", "%v", err)
	}
	if c.ProxyUID < 0 {
		return settings.Invalid("proxyUID", "must not be negative, got %d", c.ProxyUID)
	}
	return nil
}

// DNSCapture is proxyMetadata ISTIO_META_DNS_CAPTURE: whether the pod's
// DNS is captured and the agent runs its DNS proxy (envoy mode, sidecar
// only; Istio's rule). Call it on a validated Config.
func (c *Config) DNSCapture() bool {
	pm, _ := c.ProxyMetadataMap()
	on, err := strconv.ParseBool(pm[MetaDNSCapture])
	return err == nil && on && c.Mode == ModeEnvoy && c.ProxyType == ProxySidecar
}

// MetaDNSCapture is the proxyMetadata entry that turns DNS capture on
// (node metadata DNS_CAPTURE, as in Istio).
const MetaDNSCapture = "ISTIO_META_DNS_CAPTURE"

// ProxyMetadataMap decodes ProxyMetadata: nil when empty.
func (c *Config) ProxyMetadataMap() (map[string]string, error) {
	if c.ProxyMetadata == "" {
		return nil, nil
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(c.ProxyMetadata), &m); err != nil {
		return nil, fmt.Errorf("not a JSON object of strings: %v", err)
	}
	return m, nil
}

// WorkloadID is the workload's SPIFFE ID; call it on a validated Config.
func (c *Config) WorkloadID() (spiffeid.ID, error) {
	return spiffeid.WorkloadID(c.TrustDomain, c.Pod.Namespace, c.Pod.ServiceAccount)
}
