package agent

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/navemesh/nave/shared/xdsbootstrap"
	"github.com/navemesh/nave/spoke/agentconfig"
)

func testConfig(mode string) agentconfig.Config {
	return agentconfig.Config{Mode: mode, Mesh: "m1", Cluster: "c1", TrustDomain: "cluster.local", DomainSuffix: "cluster.local",
		Pod:   agentconfig.Pod{Name: "web-1", Namespace: "shop", ServiceAccount: "web", IP: "10.0.0.5", Node: "n1"},
		Trust: agentconfig.Trust{HubCA: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", MeshRoots: "-----BEGIN CERTIFICATE-----\nMESH\n-----END CERTIFICATE-----\n"},
		XDS:   agentconfig.XDS{Address: "hub.example:15010", FallbackAddress: "10.1.0.1:15010"},
		Dir:   "/var/run/nave", Envoy: agentconfig.Envoy{AdminPort: 15000, ReadyPort: 15020}}
}

func TestGRPCBootstrap(t *testing.T) {
	doc, err := Bootstrap(testConfig(agentconfig.ModeGRPC), map[string]string{"app": "web"},
		map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}", "team": "a"})
	if err != nil {
		t.Fatal(err)
	}
	var b xdsbootstrap.Bootstrap
	if err := json.Unmarshal(doc, &b); err != nil {
		t.Fatal(err)
	}
	if len(b.XDSServers) != 2 || b.XDSServers[0].ServerURI != "hub.example:15010" || b.XDSServers[1].ServerURI != "10.1.0.1:15010" {
		t.Errorf("xds servers %+v; want the hub, then the fallback", b.XDSServers)
	}
	creds := b.XDSServers[0].ChannelCreds[0]
	if creds.Type != "tls" || creds.Config.CACertificateFile != "/var/run/nave/hub-ca.pem" ||
		creds.Config.CertificateFile != "/var/run/nave/cert-chain.pem" || creds.Config.PrivateKeyFile != "/var/run/nave/key.pem" {
		t.Errorf("channel creds %+v; want TLS with the hub CA and the workload files", creds)
	}
	if fb := b.XDSServers[1].ChannelCreds[0]; fb.Type != "tls" || *fb.Config != *creds.Config {
		t.Errorf("fallback channel creds %+v; want the hub's (grpc-go uses one tls config for all servers)", fb)
	}
	fw := b.CertificateProviders[xdsbootstrap.CertificateProviderInstance].Config
	if fw.CACertificateFile != "/var/run/nave/root-cert.pem" || fw.CertificateFile != "/var/run/nave/cert-chain.pem" {
		t.Errorf("file watcher %+v", fw)
	}
	if b.ServerListenerResourceNameTemplate != xdsbootstrap.ServerListenerPrefix+"%s" {
		t.Errorf("server listener template %q", b.ServerListenerResourceNameTemplate)
	}
	md := b.Node.Metadata
	if b.Node.ID != "sidecar~10.0.0.5~web-1.shop~shop.svc.cluster.local" || md["GENERATOR"] != "grpc" || md["MESH"] != "m1" ||
		md["NAMESPACE"] != "shop" || md["SERVICE_ACCOUNT"] != "web" || md["INSTANCE_IPS"] != "10.0.0.5" || md["CLUSTER_ID"] != "c1" ||
		md["LABELS"].(map[string]any)["app"] != "web" {
		t.Errorf("node %+v", b.Node)
	}
	if ann := md["ANNOTATIONS"].(map[string]any); len(ann) != 1 || ann["team"] != "a" {
		t.Errorf("annotations %v; want team alone (last-applied-configuration left out)", ann)
	}
}

func TestEnvoyBootstrapOfThePod(t *testing.T) {
	doc, err := Bootstrap(testConfig(agentconfig.ModeEnvoy), map[string]string{"app": "web"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	for _, want := range []string{`"id": "sidecar~10.0.0.5~web-1.shop~shop.svc.cluster.local"`, `"cluster": "web.shop"`,
		`"path": "/var/run/nave/sds.sock"`, `"port_value": 15020`, `"sni": "hub.example"`} {
		if !strings.Contains(s, want) {
			t.Errorf("the Envoy bootstrap lacks %s", want)
		}
	}
	if strings.Contains(s, "GENERATOR") {
		t.Error("an Envoy bootstrap says GENERATOR")
	}
}

// A gateway's agent (proxyType router) writes a router~ node id; the rest
// of the bootstrap is a sidecar's.
func TestEnvoyBootstrapOfAGateway(t *testing.T) {
	cfg := testConfig(agentconfig.ModeEnvoy)
	cfg.ProxyType = agentconfig.ProxyRouter
	cfg.Pod.Name, cfg.Pod.Namespace = "ingress-7d9f-x2x", "istio-system"
	doc, err := Bootstrap(cfg, map[string]string{"app": "ingress", "istio": "ingressgateway"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	for _, want := range []string{`"id": "router~10.0.0.5~ingress-7d9f-x2x.istio-system~istio-system.svc.cluster.local"`,
		`"cluster": "ingress.istio-system"`, `"istio": "ingressgateway"`, `"path": "/var/run/nave/sds.sock"`} {
		if !strings.Contains(s, want) {
			t.Errorf("the gateway's bootstrap lacks %s", want)
		}
	}
}

func TestXDSRoots(t *testing.T) {
	cfg := testConfig(agentconfig.ModeGRPC)
	cfg.Trust.MeshRoots = "-----BEGIN CERTIFICATE-----\nMESH\n-----END CERTIFICATE-----\n"
	if got := XDSRoots(cfg); got != cfg.Trust.HubCA+cfg.Trust.MeshRoots {
		t.Errorf("with a fallback server: %q, want the hub's CA then the mesh roots", got)
	}
	cfg.XDS.FallbackAddress = ""
	if got := XDSRoots(cfg); got != cfg.Trust.HubCA {
		t.Errorf("without: %q, want the hub's CA alone", got)
	}
}

func TestProxyMetadataBecomesNodeMetadata(t *testing.T) {
	cfg := testConfig(agentconfig.ModeGRPC)
	cfg.ProxyMetadata = `{"ISTIO_META_DNS_CAPTURE":"true","ISTIO_META_MESH":"other","PLAIN_ENV":"x"}`
	md := grpcBootstrap(t, cfg).Node.Metadata
	if md["DNS_CAPTURE"] != "true" {
		t.Errorf("DNS_CAPTURE = %v; want ISTIO_META_DNS_CAPTURE's value", md["DNS_CAPTURE"])
	}
	if md["MESH"] != "m1" {
		t.Errorf("MESH = %v; proxyMetadata must not replace the agent's own", md["MESH"])
	}
	if _, ok := md["PLAIN_ENV"]; ok {
		t.Error("an entry without ISTIO_META_ became node metadata")
	}
	cfg.ProxyMetadata = `["not", "an object"]`
	if _, err := Bootstrap(cfg, nil, nil); err == nil || !strings.Contains(err.Error(), "proxyMetadata") {
		t.Errorf("bad proxyMetadata: %v", err)
	}
}

// The agent's network is its node's NETWORK in both bootstraps, and wins
// over a proxyMetadata ISTIO_META_NETWORK; without one, proxyMetadata's
// applies (Istio's rule), else there is none.
func TestNetworkIsNodeMetadata(t *testing.T) {
	meta := func(cfg agentconfig.Config) map[string]any {
		t.Helper()
		doc, err := Bootstrap(cfg, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Mode == agentconfig.ModeGRPC {
			var b xdsbootstrap.Bootstrap
			if err := json.Unmarshal(doc, &b); err != nil {
				t.Fatal(err)
			}
			return b.Node.Metadata
		}
		var b struct {
			Node struct {
				Metadata map[string]any `json:"metadata"`
			} `json:"node"`
		}
		if err := json.Unmarshal(doc, &b); err != nil {
			t.Fatal(err)
		}
		return b.Node.Metadata
	}
	for _, mode := range []string{agentconfig.ModeGRPC, agentconfig.ModeEnvoy} {
		cfg := testConfig(mode)
		if _, ok := meta(cfg)[xdsbootstrap.MetaNetwork]; ok {
			t.Errorf("%s: NETWORK without a network", mode)
		}
		cfg.ProxyMetadata = `{"ISTIO_META_NETWORK":"net-meta"}`
		if got := meta(cfg)[xdsbootstrap.MetaNetwork]; got != "net-meta" {
			t.Errorf("%s: NETWORK = %v, want proxyMetadata's net-meta", mode, got)
		}
		cfg.Network = "net-1"
		if got := meta(cfg)[xdsbootstrap.MetaNetwork]; got != "net-1" {
			t.Errorf("%s: NETWORK = %v, want the agent's net-1", mode, got)
		}
	}
}

// TestBootstrapListsTheReplicasHomeFirst: with xds.replicas, both
// bootstraps list the namespace's home replica first, then the others in
// HomeOrder, then xds.address, then the fallback (decision 051); two pods of
// one namespace get the same order; the node's metadata names the home.
func TestBootstrapListsTheReplicasHomeFirst(t *testing.T) {
	cfg := testConfig(agentconfig.ModeGRPC)
	cfg.XDS.Replicas = []string{"nave-hub-0=10.0.0.10:15012", "nave-hub-1=10.0.0.11:15012", "nave-hub-2=10.0.0.12:15012"}
	replicas, err := cfg.XDS.ParsedReplicas()
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, r := range xdsbootstrap.HomeOrder("m1", "shop", replicas) {
		want = append(want, r.Address)
	}
	want = append(want, "hub.example:15010", "10.1.0.1:15010")
	var got []string
	for _, s := range grpcBootstrap(t, cfg).XDSServers {
		got = append(got, s.ServerURI)
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("grpc xds servers %v; want %v", got, want)
	}
	other := cfg
	other.Pod.Name, other.Pod.IP = "web-2", "10.0.0.6"
	if first, _, _, _ := hubAddresses(other); first != want[0] {
		t.Errorf("another pod of the namespace is homed on %s, the first on %s", first, want[0])
	}
	home := xdsbootstrap.HomeOrder("m1", "shop", replicas)[0].Name
	if got := grpcBootstrap(t, cfg).Node.Metadata[xdsbootstrap.MetaHomeReplica]; got != home {
		t.Errorf("grpc node metadata %s = %v, want the home %s", xdsbootstrap.MetaHomeReplica, got, home)
	}

	cfg.Mode = agentconfig.ModeEnvoy
	doc, err := Bootstrap(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	last := -1
	for i, a := range want {
		host, _, _ := strings.Cut(a, ":")
		at := strings.Index(s, `"address": "`+host+`"`)
		if at <= last {
			t.Fatalf("the Envoy bootstrap lists %s (#%d) at %d, not after the one before (%d)", a, i, at, last)
		}
		last = at
	}
	if !strings.Contains(s, `"`+xdsbootstrap.MetaHomeReplica+`": "`+home+`"`) {
		t.Errorf("the Envoy bootstrap's node does not name its home %s", home)
	}
	if _, ok := grpcBootstrap(t, testConfig(agentconfig.ModeGRPC)).Node.Metadata[xdsbootstrap.MetaHomeReplica]; ok {
		t.Errorf("a bootstrap without xds.replicas names a home")
	}

	cfg.XDS.Replicas = []string{"nave-hub-0"}
	if _, err := Bootstrap(cfg, nil, nil); err == nil || !strings.Contains(err.Error(), "xds.replicas") {
		t.Errorf("a replica without an address: err %v", err)
	}
}

// grpcBootstrap is the grpc bootstrap an agent with cfg writes for a pod
// without labels or annotations, decoded.
func grpcBootstrap(t *testing.T, cfg agentconfig.Config) xdsbootstrap.Bootstrap {
	t.Helper()
	doc, err := Bootstrap(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b xdsbootstrap.Bootstrap
	if err := json.Unmarshal(doc, &b); err != nil {
		t.Fatal(err)
	}
	return b
}
