// Package hubconfig is the configuration of the nave-hub binary, loaded by settings.Load and
// documented in docs/config.md.
package hubconfig

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/shared/debounce"
	"github.com/navemesh/nave/shared/logging"
	"github.com/navemesh/nave/shared/settings"
	"github.com/navemesh/nave/shared/spiffeid"
)

// Program is the hub binary's name, as its usage text and the config reference show it.
const Program = "nave-hub"

// minMessageBytes is the least message size limit accepted for gRPC streams.
const minMessageBytes = 1024

// Config is the whole configuration of the hub. Like its sections it is a plain value, filled
// once at start-up: copy it freely; do not change one that goroutines share.
type Config struct {
	Log    logging.Config `key:"log" help:"logging"`
	Admin  Admin          `key:"admin" help:"the admin HTTP server: health probes, metrics and debug views"`
	Spokes Spokes         `key:"spokes" help:"the gRPC sync service that spokes dial to push their clusters' state"`
	XDS    XDS            `key:"xds" help:"the aggregated discovery service (ADS) that proxies dial"`
	Ingest Ingest         `key:"ingest" help:"how the hub keeps the state spokes push"`
	Push   Push           `key:"push" help:"how changes are batched before proxies are pushed"`
	State  State          `key:"state" help:"where the hub keeps what must survive a restart"`
	TLS    TLS            `key:"tls" help:"transport security of the spokes and xds listeners"`
	CA     CA             `key:"ca" help:"the per-mesh certificate authorities (the tenants) and spoke enrollment"`
	// Replicas makes the hub one of a set of replicas (docs/replicas.md).
	Replicas Replicas `key:"replicas" help:"running the hub as a set of replicas that each serve every proxy (docs/replicas.md); off unless replicas.join is set"`
	SDS      SDS      `key:"sds" help:"secrets the xds listener serves Envoy proxies itself (SDS over ADS)"`
	Limits   Limits   `key:"limits" help:"what one mesh (tenant) may make the hub do, so that one cannot slow another: the defaults of every mesh whose record sets none (docs/meshes.md)"`
	Memory   Memory   `key:"memory" help:"the hub process's memory"`
}

// Memory configures the hub process's memory (decision 052).
type Memory struct {
	IdleRelease time.Duration `key:"idleRelease" default:"30s" help:"once the hub has allocated little (under half its live heap) for this long after a burst (a connection storm, a fan-out) and holds over twice its live heap (a storm's headroom; one config change's is left alone), it collects once and returns the free memory to the OS: an idle hub keeps what is live, not the storm's headroom (docs/decisions/052-idle-hub-memory.md). The peak during a burst is unchanged. 0: never (Go's scavenger alone returns it, slowly)"`
}

// Validate refuses a negative idleRelease.
func (m *Memory) Validate() error {
	if m.IdleRelease < 0 {
		return settings.Invalid("idleRelease", "must be 0 (never) or more, got %s", m.IdleRelease)
	}
	return nil
}

// Limits are the hub-wide defaults of the per-mesh limits (a mesh's own
// record overrides each that it sets). They are generous: a mesh within
// them is one a single hub replica serves without strain; they exist to
// stop a runaway tenant, not to size a normal one.
type Limits struct {
	ObjectsPerKind  int     `key:"objectsPerKind" default:"20000" help:"config objects of one kind (ServiceEntry, WorkloadEntry, ...) one mesh may hold, all its clusters together; more are refused with a NACK naming the limit, and what the mesh holds stays"`
	Proxies         int     `key:"proxies" default:"10000" help:"xDS streams of one mesh one replica serves at once; more are refused (RESOURCE_EXHAUSTED, naming the limit)"`
	Spokes          int     `key:"spokes" default:"500" help:"clusters one mesh may have connected or held at once; another is refused (RESOURCE_EXHAUSTED, naming the limit)"`
	PushesPerSecond float64 `key:"pushesPerSecond" default:"50" help:"push-context builds of one mesh per second; changes arriving faster are merged into the next build"`
}

// Validate checks every limit is positive.
func (l *Limits) Validate() error {
	for _, c := range []struct {
		key string
		v   float64
	}{{"objectsPerKind", float64(l.ObjectsPerKind)}, {"proxies", float64(l.Proxies)}, {"spokes", float64(l.Spokes)}, {"pushesPerSecond", l.PushesPerSecond}} {
		if c.v <= 0 {
			return settings.Invalid(c.key, "must be greater than 0, got %v", c.v)
		}
	}
	return nil
}

// SDS configures the secrets the hub serves over ADS.
type SDS struct {
	MintKeys bool `key:"mintKeys" default:"false" help:"mint a key and workload certificate per Envoy stream and serve them as SDS secrets default and ROOTCA over ADS, for Envoys without a nave-agent (VMs, tests): the key then exists outside the workload. Off, no workload private key exists outside its pod: Envoys get their secrets from the agent in their pod (node metadata SDS_CLUSTER)"`
}

// Validate checks what spans sections: with tls.plaintext a proxy whose
// node names no mesh is of xds.defaultMesh, which must then be a mesh the
// hub serves, or every such proxy would be refused.
func (c *Config) Validate() error {
	if err := c.validatePolled(); err != nil {
		return err
	}
	if !c.TLS.Plaintext {
		return nil
	}
	if c.Admin.OperatorListen != "" {
		return settings.Invalid("admin.operatorListen", "needs TLS: it serves the hub's serving certificate and checks operator certificates, which tls.plaintext turns off")
	}
	meshes, err := c.CA.parse()
	if err != nil {
		return nil // ca.meshes reports it
	}
	names := make([]string, 0, len(meshes))
	for _, m := range meshes {
		if m.Name == c.XDS.DefaultMesh {
			return nil
		}
		names = append(names, m.Name)
	}
	return settings.Invalid("xds.defaultMesh", "with tls.plaintext it must be a mesh of ca.meshes (%s), got %q", strings.Join(names, ", "), c.XDS.DefaultMesh)
}

// validatePolled refuses a polled spoke of a mesh the hub does not serve.
func (c *Config) validatePolled() error {
	polled, err := c.Spokes.PolledSpokes()
	if err != nil {
		return nil // spokes.poll reports it
	}
	meshes := c.CA.MeshNames()
	for _, p := range polled {
		if !slices.Contains(meshes, p.Mesh) {
			return settings.Invalid("spokes.poll", "mesh %q of %s/%s is not a mesh of ca.meshes (%s)", p.Mesh, p.Mesh, p.Cluster, strings.Join(meshes, ", "))
		}
	}
	return nil
}

// State configures where the hub keeps what must survive a restart.
type State struct {
	Dir        string `key:"dir" default:"nave-hub-state" required:"true" help:"directory of the hub's persistent state: the mesh CAs (ca/<mesh>/, with ca.store=dir), the hub's serving CA (serving-ca/hub/, what spokes pin) and spoke enrollment with the clusters that ever synced (enroll/, in plaintext mode too), both with state.store=dir; replicas share it on a volume. Unused when ca.store and state.store are kubernetes"`
	Store      string `key:"store" default:"dir" help:"where the hub keeps its serving CA and spoke enrollment (join tokens and their use, enrolled and revoked clusters, and the clusters that ever synced, in plaintext mode too): dir (under state.dir; replicas share the volume) or kubernetes (Secrets nave-serving-ca-hub and nave-enroll-* in state.namespace; replicas share the API server and need no volume). The mesh CAs follow ca.store"`
	Namespace  string `key:"namespace" default:"nave-system" help:"with state.store=kubernetes, the namespace of the state Secrets; the hub needs get, create, update, list and delete on secrets there (deploy/hub/rbac.yaml)"`
	Kubeconfig string `key:"kubeconfig" help:"with state.store=kubernetes, kubeconfig file to reach the API server; empty: in-cluster credentials, else $KUBECONFIG"`
	// MeshRefreshInterval is tenants.Options.RefreshInterval.
	MeshRefreshInterval time.Duration `key:"meshRefreshInterval" default:"2s" help:"how often every replica reads the meshes (tenants) from state.store (state.dir/meshes/, or Secrets nave-mesh-* and nave-meshstatus-* in state.namespace; docs/meshes.md): a mesh created, updated or deleted on one replica, or a spec written into the store, is served by every replica within about this long (twice this long for a spec written outside the hub)"`
}

// Validate checks the store, its namespace and kubeconfig, and the mesh
// refresh interval.
func (s *State) Validate() error {
	if s.MeshRefreshInterval < 100*time.Millisecond || s.MeshRefreshInterval > 5*time.Minute {
		return settings.Invalid("meshRefreshInterval", "must be from 100ms to 5m, got %s", s.MeshRefreshInterval)
	}
	return validateStore("state", s.Store, s.Namespace, s.Kubeconfig)
}

// validateStore checks a section's store, namespace and kubeconfig keys.
func validateStore(section, store, namespace, kubeconfig string) error {
	switch store {
	case StoreDir:
		if kubeconfig != "" {
			return settings.Invalid("kubeconfig", "is used only with %s.store=%s, but %s.store is %s", section, StoreKubernetes, section, store)
		}
	case StoreKubernetes:
		if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
			return settings.Invalid("namespace", "%q is not a namespace name: %s", namespace, strings.Join(errs, "; "))
		}
	default:
		return settings.Invalid("store", "must be %s or %s, got %q", StoreDir, StoreKubernetes, store)
	}
	return nil
}

// TLS configures transport security.
type TLS struct {
	Plaintext        bool          `key:"plaintext" default:"false" help:"INSECURE: serve the spokes and xds listeners without TLS and check no credentials: a spoke names its own mesh and cluster, a proxy its own mesh (else xds.defaultMesh), namespace and service account, and the hub believes them; a mesh not listed in ca.meshes is still refused. For tests and local development only; logged loudly"`
	Hosts            []string      `key:"hosts" default:"localhost,127.0.0.1,::1" help:"DNS names and IP addresses the hub's serving certificate is valid for: the names spokes and proxies dial it by; no spoke's cluster certificate may carry one (its fallback server names, docs/fallback.md)"`
	HandshakeTimeout time.Duration `key:"handshakeTimeout" default:"10s" help:"a connection that has not completed its TLS handshake in this long is closed"`
}

// Validate checks the hosts and the timeout.
func (t *TLS) Validate() error {
	if !t.Plaintext && len(t.Hosts) == 0 {
		return settings.Invalid("hosts", "must name at least one DNS name or IP address the hub is dialled by")
	}
	for _, h := range t.Hosts {
		if net.ParseIP(h) == nil && len(validation.IsDNS1123Subdomain(h)) > 0 && len(validation.IsWildcardDNS1123Subdomain(h)) > 0 {
			return settings.Invalid("hosts", "%q is neither an IP address nor a DNS name", h)
		}
	}
	if t.HandshakeTimeout <= 0 {
		return settings.Invalid("handshakeTimeout", "must be greater than 0, got %s", t.HandshakeTimeout)
	}
	return nil
}

// CA configures the mesh certificate authorities.
type CA struct {
	Meshes          []string      `key:"meshes" default:"default=cluster.local" help:"the meshes (tenants) to seed, as MESH=TRUSTDOMAIN: each entry is created in state.store once, at the first start that lists it, unless a mesh of that name is there; after that meshes are managed at runtime (navectl mesh, docs/meshes.md), and a seeded mesh deleted stays deleted. Each mesh gets its own root of trust in ca.store (generated, or plugged in as Istio's cacerts files); two meshes never share a trust domain. Spokes and proxies of any other mesh are refused, with tls.plaintext too"`
	Store           string        `key:"store" default:"dir" help:"where the mesh CAs are kept: dir (state.dir/ca/<mesh>/, one file per blob; replicas share the volume) or kubernetes (Secret nave-ca-<mesh> in ca.namespace, one data key per blob; replicas share the API server). A plugged-in CA is Istio's cacerts files (ca-cert.pem, ca-key.pem, cert-chain.pem, root-cert.pem) in that directory or Secret"`
	Namespace       string        `key:"namespace" default:"nave-system" help:"with ca.store=kubernetes, the namespace of the mesh CA Secrets; the hub needs get and create on secrets there (deploy/hub/rbac.yaml)"`
	Kubeconfig      string        `key:"kubeconfig" help:"with ca.store=kubernetes, kubeconfig file to reach the API server; empty: in-cluster credentials, else $KUBECONFIG"`
	WorkloadCertTTL time.Duration `key:"workloadCertTTL" default:"24h" help:"lifetime of workload certificates that name none"`
	ClusterCertTTL  time.Duration `key:"clusterCertTTL" default:"24h" help:"lifetime of spoke cluster certificates; spokes renew at about 80 %"`
	RefreshInterval time.Duration `key:"refreshInterval" default:"30s" help:"how often the hub reads ca.store again to take up a root rotation step (navectl roots add, switch, drop) without a restart; every replica does, and sends the new bundle to its spokes"`
}

// Values of CA.Store and State.Store.
const (
	StoreDir        = ca.StoreDir
	StoreKubernetes = ca.StoreKubernetes
)

// Mesh is one entry of CA.Meshes.
type Mesh struct{ Name, TrustDomain string }

// MeshNames returns the names of CA.Meshes; call it on a validated Config.
func (c *CA) MeshNames() []string {
	var out []string
	for _, m := range c.ParsedMeshes() {
		out = append(out, m.Name)
	}
	return out
}

// ParsedMeshes returns CA.Meshes parsed; call it on a validated Config.
func (c *CA) ParsedMeshes() []Mesh {
	out, _ := c.parse()
	return out
}

func (c *CA) parse() ([]Mesh, error) {
	var out []Mesh
	names, tds := map[string]bool{}, map[string]bool{}
	for _, e := range c.Meshes {
		name, td, ok := strings.Cut(e, "=")
		if !ok {
			return nil, settings.Invalid("meshes", "%q: want MESH=TRUSTDOMAIN", e)
		}
		if err := spiffeid.ValidateName(name); err != nil {
			return nil, settings.Invalid("meshes", "%q: mesh name: %v", e, err)
		}
		if err := spiffeid.ValidateTrustDomain(td); err != nil {
			return nil, settings.Invalid("meshes", "%q: trust domain: %v", e, err)
		}
		if names[name] {
			return nil, settings.Invalid("meshes", "mesh %q is listed twice", name)
		}
		if tds[td] {
			return nil, settings.Invalid("meshes", "trust domain %q is listed for two meshes; each mesh needs its own", td)
		}
		names[name], tds[td] = true, true
		out = append(out, Mesh{name, td})
	}
	return out, nil
}

// Validate checks the meshes, the store and the lifetimes.
func (c *CA) Validate() error {
	if len(c.Meshes) == 0 {
		return settings.Invalid("meshes", "must list at least one MESH=TRUSTDOMAIN")
	}
	if _, err := c.parse(); err != nil {
		return err
	}
	if err := validateStore("ca", c.Store, c.Namespace, c.Kubeconfig); err != nil {
		return err
	}
	if c.RefreshInterval < time.Second {
		return settings.Invalid("refreshInterval", "must be at least 1s, got %s", c.RefreshInterval)
	}
	if c.WorkloadCertTTL < time.Minute {
		return settings.Invalid("workloadCertTTL", "must be at least 1m, got %s", c.WorkloadCertTTL)
	}
	if c.ClusterCertTTL < time.Minute {
		return settings.Invalid("clusterCertTTL", "must be at least 1m, got %s", c.ClusterCertTTL)
	}
	return nil
}

// Admin configures the admin HTTP server.
type Admin struct {
	Listen         string `key:"listen" default:"127.0.0.1:15014" help:"host:port the admin HTTP server (metrics, health, debug) listens on; with operatorListen set it serves only health probes and metrics"`
	OperatorListen string `key:"operatorListen" help:"host:port of the operators' admin server: HTTPS with the hub's serving certificate, requiring an operator client certificate (navectl operator issue); a tenant's operator sees only its mesh, the vendor's everything (pprof too). Empty: off, the debug views stay on listen. Needs TLS (not tls.plaintext)"`
}

// Validate checks the listen addresses.
func (a *Admin) Validate() error {
	if err := settings.CheckHostPort("listen", a.Listen); err != nil {
		return err
	}
	if a.OperatorListen != "" {
		return settings.CheckHostPort("operatorListen", a.OperatorListen)
	}
	return nil
}

// Spokes configures the gRPC sync service.
type Spokes struct {
	Listen          string `key:"listen" default:"127.0.0.1:15012" help:"host:port the gRPC sync service that spokes dial listens on"`
	MaxMessageBytes int    `key:"maxMessageBytes" default:"16777216" help:"largest gRPC message accepted from or sent to a spoke, in bytes"`
	// Poll lists the spokes in polled mode (docs/protocol.md, "Polled
	// mode"); PolledSpokes parses it.
	Poll               []string      `key:"poll" help:"spokes in polled mode (their hub.mode is polled), which the hub dials instead of being dialled, as MESH/CLUSTER=HOST:PORT (the spoke's hub.pollListen); the spoke must prove with its certificate to be that cluster, enrolled and not revoked. With replicas one live replica dials each (docs/protocol.md, Polled mode)"`
	PollBackoffInitial time.Duration `key:"pollBackoffInitial" default:"250ms" help:"wait before dialling a polled spoke again after a failure, drawn from 50-150 % of this value; each further wait is 1.5 times the previous one, up to pollBackoffMax; the waits start over once a stream was admitted"`
	PollBackoffMax     time.Duration `key:"pollBackoffMax" default:"15s" help:"longest wait between attempts to dial a polled spoke, jitter included"`
}

// PolledSpoke is one entry of spokes.poll. A plain value.
type PolledSpoke struct {
	Mesh, Cluster, Address string
}

// PolledSpokes parses spokes.poll, refusing a malformed entry, two
// entries for one cluster and two clusters at one address.
func (s *Spokes) PolledSpokes() ([]PolledSpoke, error) {
	seen := map[[2]string]string{}
	addrs := map[string]string{} // address → mesh/cluster
	var out []PolledSpoke
	for _, e := range s.Poll {
		id, address, ok := strings.Cut(e, "=")
		if !ok {
			return nil, fmt.Errorf("%q: want MESH/CLUSTER=HOST:PORT", e)
		}
		mesh, cluster, ok := strings.Cut(id, "/")
		if !ok {
			return nil, fmt.Errorf("%q: %q is not MESH/CLUSTER", e, id)
		}
		for _, f := range [][2]string{{"mesh", mesh}, {"cluster", cluster}} {
			if err := spiffeid.ValidateName(f[1]); err != nil {
				return nil, fmt.Errorf("%q: %s %q %v; it must be a DNS label", e, f[0], f[1], err)
			}
		}
		if host, _, err := net.SplitHostPort(address); err != nil || host == "" {
			return nil, fmt.Errorf("%q: address %q is not HOST:PORT", e, address)
		}
		if prev, dup := seen[[2]string{mesh, cluster}]; dup {
			return nil, fmt.Errorf("%s/%s is listed twice (%s and %s)", mesh, cluster, prev, address)
		}
		if other, dup := addrs[address]; dup {
			return nil, fmt.Errorf("%s is the address of %s and of %s/%s: one spoke serves one cluster", address, other, mesh, cluster)
		}
		seen[[2]string{mesh, cluster}] = address
		addrs[address] = mesh + "/" + cluster
		out = append(out, PolledSpoke{Mesh: mesh, Cluster: cluster, Address: address})
	}
	return out, nil
}

// Validate checks the listen address, the message size limit and the
// polled spokes.
func (s *Spokes) Validate() error {
	if err := settings.CheckHostPort("listen", s.Listen); err != nil {
		return err
	}
	if s.MaxMessageBytes < minMessageBytes {
		return settings.Invalid("maxMessageBytes", "must be at least %d, got %d", minMessageBytes, s.MaxMessageBytes)
	}
	if _, err := s.PolledSpokes(); err != nil {
		return settings.Invalid("poll", "%v", err)
	}
	if s.PollBackoffInitial <= 0 {
		return settings.Invalid("pollBackoffInitial", "must be greater than 0, got %s", s.PollBackoffInitial)
	}
	if s.PollBackoffMax < s.PollBackoffInitial {
		return settings.Invalid("pollBackoffMax", "must be at least pollBackoffInitial (%s), got %s", s.PollBackoffInitial, s.PollBackoffMax)
	}
	return nil
}

// XDS configures the discovery service proxies dial.
type XDS struct {
	Listen           string        `key:"listen" default:"127.0.0.1:15010" help:"host:port the ADS server that proxies dial listens on"`
	DefaultMesh      string        `key:"defaultMesh" default:"default" required:"true" help:"mesh of a proxy whose node metadata names none, in plaintext mode (with TLS its certificate decides); with tls.plaintext it must be a mesh of ca.meshes"`
	SendTimeout      time.Duration `key:"sendTimeout" default:"30s" help:"a proxy that does not read a response for this long (it stopped reading; flow control blocks) is disconnected, with a logged reason"`
	AdmissionRate    float64       `key:"admissionRate" default:"500" help:"new proxy streams served per second (0: unlimited); a connection storm is admitted in arrival order at this rate"`
	AdmissionBurst   int           `key:"admissionBurst" default:"100" help:"new proxy streams that may be admitted at once before admissionRate applies"`
	MaxConnectionAge time.Duration `key:"maxConnectionAge" default:"0s" help:"a proxy connection older than this (with up to 10 % jitter) is asked to reconnect (gRPC GOAWAY; open streams get 30 s to end): with replicas, the safety net that evens the spread over time. 0: never"`
	MaxInflightBytes int64         `key:"maxInflightBytes" default:"67108864" help:"bytes of responses of 64 KiB or more being sent at once across all proxies (gRPC holds a marshalled copy of each until written): bounds memory in connection storms; a larger response waits for room; -1 means unbounded"`
}

// Validate checks the listen address, the timeout and the admission limits.
func (x *XDS) Validate() error {
	if err := settings.CheckHostPort("listen", x.Listen); err != nil {
		return err
	}
	if x.SendTimeout <= 0 {
		return settings.Invalid("sendTimeout", "must be greater than 0, got %s", x.SendTimeout)
	}
	if x.MaxConnectionAge < 0 {
		return settings.Invalid("maxConnectionAge", "must not be negative, got %s", x.MaxConnectionAge)
	}
	if x.AdmissionRate < 0 {
		return settings.Invalid("admissionRate", "must be 0 (unlimited) or more, got %g", x.AdmissionRate)
	}
	if x.MaxInflightBytes == 0 || x.MaxInflightBytes < -1 {
		return settings.Invalid("maxInflightBytes", "must be positive, or -1 for unbounded, got %d", x.MaxInflightBytes)
	}
	if x.AdmissionBurst < 1 {
		return settings.Invalid("admissionBurst", "must be at least 1, got %d", x.AdmissionBurst)
	}
	return nil
}

// Ingest configures how spoke state is kept.
type Ingest struct {
	StaleGracePeriod time.Duration `key:"staleGracePeriod" default:"10m" help:"how long a disconnected cluster's resources stay (marked stale) before they are withdrawn"`
	StartupGrace     time.Duration `key:"startupGrace" default:"30s" help:"after the hub starts, a mesh is not served until every cluster it had (enrolled, or remembered in state.store at its first sync, plaintext mode too; not revoked) has synced, or this long has passed; clusters still missing then are listed at /debug/spokes. 0 serves a mesh as soon as one cluster synced"`
}

// Validate checks the grace period is positive.
func (i *Ingest) Validate() error {
	if i.StaleGracePeriod <= 0 {
		return settings.Invalid("staleGracePeriod", "must be greater than 0, got %s", i.StaleGracePeriod)
	}
	if i.StartupGrace < 0 {
		return settings.Invalid("startupGrace", "must not be negative, got %s", i.StartupGrace)
	}
	return nil
}

// Push configures the debounce of config changes before pushes.
type Push struct {
	DebounceQuiet time.Duration `key:"debounceQuiet" default:"100ms" help:"push once no config change has arrived for this long"`
	DebounceMax   time.Duration `key:"debounceMax" default:"1s" help:"push at the latest this long after the first change of a batch, even if changes keep arriving"`
	DebounceEdge  debounce.Edge `key:"debounceEdge" default:"leading" help:"leading: the first config change after debounceQuiet without changes is pushed at once, and the changes that follow it within debounceQuiet are held and pushed together; trailing: every change waits until none has arrived for debounceQuiet"`
	Adaptive      bool          `key:"adaptive" default:"false" help:"do not rebuild a mesh no proxy is connected to (its debug views then lag); build it when one connects. Generation is lazy either way"`
	// VerifyIncremental is a test mode (invariant 6): see pushctx.Options.Verify.
	VerifyIncremental        bool `key:"verifyIncremental" default:"false" help:"test mode: also generate from scratch whatever is generated incrementally and log and count any difference (doubles generation cost)"`
	MaxConcurrentGenerations int  `key:"maxConcurrentGenerations" default:"0" help:"proxy generations run at once across all meshes (a connection storm or a mesh-wide change is generated in turns); 0 means one per CPU"`
}

// Validate checks quiet > 0, max >= quiet and the edge.
func (p *Push) Validate() error {
	if p.DebounceQuiet <= 0 {
		return settings.Invalid("debounceQuiet", "must be greater than 0, got %s", p.DebounceQuiet)
	}
	if p.MaxConcurrentGenerations < 0 {
		return settings.Invalid("maxConcurrentGenerations", "must be 0 (one per CPU) or more, got %d", p.MaxConcurrentGenerations)
	}
	if err := p.DebounceEdge.Validate(); err != nil {
		return settings.Invalid("debounceEdge", "%v", err)
	}
	if p.DebounceMax < p.DebounceQuiet {
		return settings.Invalid("debounceMax", "must be at least debounceQuiet (%s), got %s", p.DebounceQuiet, p.DebounceMax)
	}
	return nil
}

// Replicas configures the hub as one of a set of replicas.
type Replicas struct {
	ID               string        `key:"id" help:"this replica's id, a DNS label unique in the set (a StatefulSet pod's name fits); empty: the host name"`
	Join             []string      `key:"join" help:"replicas to join: host:port or host (then bindPort), a host being an IP address or a DNS name whose every address is tried, such as a headless Service's; listing this replica too is fine. Empty: a single hub, no replicas"`
	BindAddress      string        `key:"bindAddress" default:"0.0.0.0" help:"address gossip (memberlist, TCP and UDP) listens on"`
	BindPort         int           `key:"bindPort" default:"7946" help:"port gossip listens on (TCP and UDP)"`
	AdvertiseAddress string        `key:"advertiseAddress" help:"address peers reach this replica's gossip and relay at; empty: bindAddress, or a private address of the host when that is 0.0.0.0"`
	RelayListen      string        `key:"relayListen" default:"0.0.0.0:15016" help:"host:port of the relay listener: peers relay their spokes' state here (mTLS, replica certificates of the hub's serving CA)"`
	KeyringFile      string        `key:"keyringFile" help:"file of the gossip keyring (a mounted Secret): one base64 AES key of 16, 24 or 32 bytes per line, the first used to encrypt; make one with: head -c 32 /dev/urandom | base64. A member without the key cannot join"`
	InsecureGossip   bool          `key:"insecureGossip" default:"false" help:"INSECURE, for tests only: gossip in the clear without replicas.keyringFile; anyone who reaches the gossip port can join"`
	ReadyTimeout     time.Duration `key:"readyTimeout" default:"60s" help:"a new replica reports ready once it holds the relayed state of every cluster its peers hold, or after this long"`
	RejoinInterval   time.Duration `key:"rejoinInterval" default:"10s" help:"how often the replicas in join are joined again while one of them is not a live member, so that a replica that started first or was cut off finds the others"`
	ShedRate         float64       `key:"shedRate" default:"5" help:"proxy connections a replica closes per second (each at a random moment): those whose node names another ready replica their home (an agent with xds.replicas; docs/replicas.md), which reconnect there, and, of those that name none, the ones it holds above its share of an even spread over the ready replicas (such as one that just joined), which reconnect through the load balancer. A proxy at home is never shed. 0: never shed"`
	ShedTolerance    float64       `key:"shedTolerance" default:"0.1" help:"share above the even spread of proxy connections that is tolerated before shedding (0.1: 10 %, and at least 2 connections)"`
	SpokeShedRate    float64       `key:"spokeShedRate" default:"0.2" help:"spokes a replica owning more than its share (and at least 2 more than the least-loaded ready replica) asks to reconnect elsewhere, per second at most, one at a time (the next once the last has landed), each at a random moment; the spoke reconnects at once, to spokeAddress of the least-loaded replica first. 0: never move a spoke"`
	SpokeMinAge      time.Duration `key:"spokeMinAge" default:"1m" help:"a spoke's stream must be synced and at least this old before it is moved to balance spokes, so that a spoke that just moved is not moved again"`
	SpokeAddress     string        `key:"spokeAddress" help:"host:port spokes reach this replica's sync service (spokes.listen) at directly, gossiped to peers: a replica moving a spoke here names it to the spoke, which tries it first (its TLS still checks the name of its own hub.address). Empty: name none; the spoke reconnects through its hub.address (a Service lands it on any replica)"`
}

// Enabled reports whether the hub runs as a replica.
func (r *Replicas) Enabled() bool { return len(r.Join) > 0 }

// Validate checks the id, the addresses, the keyring and the timeouts.
func (r *Replicas) Validate() error {
	if !r.Enabled() {
		return nil
	}
	if r.ID != "" {
		if errs := validation.IsDNS1123Label(r.ID); len(errs) > 0 {
			return settings.Invalid("id", "%q is not a DNS label: %s", r.ID, strings.Join(errs, "; "))
		}
	}
	if net.ParseIP(r.BindAddress) == nil {
		return settings.Invalid("bindAddress", "%q is not an IP address", r.BindAddress)
	}
	if r.AdvertiseAddress != "" && net.ParseIP(r.AdvertiseAddress) == nil {
		return settings.Invalid("advertiseAddress", "%q is not an IP address", r.AdvertiseAddress)
	}
	if r.BindPort < 1 || r.BindPort > 65535 {
		return settings.Invalid("bindPort", "must be a port (1-65535), got %d", r.BindPort)
	}
	if err := settings.CheckHostPort("relayListen", r.RelayListen); err != nil {
		return err
	}
	if r.KeyringFile == "" && !r.InsecureGossip {
		return settings.Invalid("keyringFile", "replicas.join is set: name the gossip keyring file (or, for tests only, set replicas.insecureGossip)")
	}
	if r.ReadyTimeout <= 0 {
		return settings.Invalid("readyTimeout", "must be greater than 0, got %s", r.ReadyTimeout)
	}
	if r.ShedRate < 0 {
		return settings.Invalid("shedRate", "must be 0 (never shed) or more, got %g", r.ShedRate)
	}
	if r.SpokeShedRate < 0 {
		return settings.Invalid("spokeShedRate", "must be 0 (never move a spoke) or more, got %g", r.SpokeShedRate)
	}
	if r.SpokeMinAge < 0 {
		return settings.Invalid("spokeMinAge", "must not be negative, got %s", r.SpokeMinAge)
	}
	if r.SpokeAddress != "" {
		if err := settings.CheckHostPort("spokeAddress", r.SpokeAddress); err != nil {
			return err
		}
	}
	if r.ShedTolerance < 0 {
		return settings.Invalid("shedTolerance", "must not be negative, got %g", r.ShedTolerance)
	}
	if r.RejoinInterval <= 0 {
		return settings.Invalid("rejoinInterval", "must be greater than 0, got %s", r.RejoinInterval)
	}
	return nil
}
