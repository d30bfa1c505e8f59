package gen

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/navemesh/nave/internal/envoysim"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// meshSnapshot builds gentest.Mesh (plus extra YAML, in cluster c1) with
// the MeshConfig of yaml cfg ("" = nil), which must be valid.
func meshSnapshot(t *testing.T, cfg, extra string) *mesh.Snapshot {
	t.Helper()
	objs, errs := meshconfig.DecodeYAML([]byte(gentest.Mesh+"\n---\n"+extra), "c1.yaml")
	if len(errs) > 0 {
		t.Fatalf("decode: %v", errs)
	}
	b := &mesh.Builder{MeshConfig: parseMeshConfig(t, cfg)}
	return b.Build("m", []mesh.ClusterInput{{Name: "c1", Synced: true, Connected: true, Objects: objs}})
}

func parseMeshConfig(t *testing.T, y string) *meshv1alpha1.MeshConfig {
	t.Helper()
	if y == "" {
		return nil
	}
	cfg, err := meshconfig.ParseMeshConfig([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if err := meshconfig.ValidateMeshConfig(cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

var (
	reviewsKey  = goldenProxies[0].key
	frontendKey = goldenProxies[1].key
)

// TestMeshConfigEmptyKeepsGoldens: an empty MeshConfig is Istio's
// defaults, and nave's: every golden proxy gets what the golden files say.
func TestMeshConfigEmptyKeepsGoldens(t *testing.T) {
	snap := meshSnapshot(t, "{}", "")
	for _, p := range goldenProxies {
		want, err := os.ReadFile(filepath.Join("testdata", "golden", p.name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		if got := goldenJSON(t, Envoy(snap, p.key)); !bytes.Equal(got, want) {
			t.Errorf("%s: an empty MeshConfig changes the output", p.name)
		}
	}
}

// TestGoldenMeshConfig compares a sidecar's config under a MeshConfig
// that sets every supported field with testdata/golden/meshconfig-*.json.
func TestGoldenMeshConfig(t *testing.T) {
	snap := meshSnapshot(t, `
rootNamespace: mesh-root
trustDomain: cluster.local
trustDomainAliases: [old.example]
outboundTrafficPolicy: {mode: REGISTRY_ONLY}
enableAutoMtls: false
connectTimeout: 3s
localityLbSetting: {distribute: [{from: "us-east/*", to: {"us-east/*": 70, "us-west/*": 30}}]}
defaultServiceExportTo: ["*"]
defaultVirtualServiceExportTo: ["*"]
defaultDestinationRuleExportTo: ["*"]
serviceSettings: [{settings: {clusterLocal: true}, hosts: [ratings.shop.svc.cluster.local]}]
extensionProviders: [{name: authz, envoyExtAuthzGrpc: {service: authz.sys.svc.cluster.local, port: 9000}}]
`, "")
	key := reviewsKey
	key.Cluster = "c1"
	checkGolden(t, "meshconfig-sidecar-shop-reviews.json", goldenJSON(t, Envoy(snap, key)))
}

func cluster(t *testing.T, out *Output, name string) *clusterv3.Cluster {
	t.Helper()
	r := gentest.ByName(out, typeurl.Cluster, name)
	c, ok := r.Message.(*clusterv3.Cluster)
	if !ok {
		t.Fatalf("no cluster %s", name)
	}
	return c
}

func assignment(t *testing.T, out *Output, name string) *endpointv3.ClusterLoadAssignment {
	t.Helper()
	r := gentest.ByName(out, typeurl.Endpoint, name)
	a, ok := r.Message.(*endpointv3.ClusterLoadAssignment)
	if !ok {
		t.Fatalf("no assignment %s", name)
	}
	return a
}

func addresses(a *endpointv3.ClusterLoadAssignment) []string {
	var out []string
	for _, l := range a.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			out = append(out, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
		}
	}
	slices.Sort(out)
	return out
}

// TestMeshConfigRootNamespace: mesh-wide policies live in the MeshConfig's
// root namespace; istio-system is then an ordinary namespace.
func TestMeshConfigRootNamespace(t *testing.T) {
	req := envoysim.Request{Inbound: true, IP: "10.1.0.1", Port: 9080, Authority: "reviews", Method: "GET", Path: "/reviews/1",
		SourceIP: "203.0.113.9", PeerCert: "spiffe://cluster.local/ns/web/sa/frontend", ALPN: []string{"istio"}}
	for _, tc := range []struct {
		cfg    string
		denied bool
	}{
		{"", true},                            // istio-system is the root: its DENY applies to shop
		{"rootNamespace: istio-system", true}, // said explicitly
		{"rootNamespace: mesh-root", false},   // istio-system is a namespace like any other
	} {
		s := envoysim.New(Envoy(meshSnapshot(t, tc.cfg, ""), reviewsKey).Resources)
		r := s.Do(req)
		if denied := strings.Contains(r.Denied, "deny-blocked"); denied != tc.denied {
			t.Errorf("MeshConfig %q: denied %q, want denied by deny-blocked %v (err %v)", tc.cfg, r.Denied, tc.denied, r.Err)
		}
	}
	// The mesh-root namespace's policy applies once it is the root.
	extra := "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: root-deny, namespace: mesh-root}\nspec: {action: DENY, rules: [{from: [{source: {ipBlocks: [203.0.113.0/24]}}]}]}\n"
	r := envoysim.New(Envoy(meshSnapshot(t, "rootNamespace: mesh-root", extra), reviewsKey).Resources).Do(req)
	if !strings.Contains(r.Denied, "root-deny") {
		t.Errorf("root-deny in the root namespace mesh-root: denied %q", r.Denied)
	}
}

// TestMeshConfigOutboundTrafficPolicy: REGISTRY_ONLY mesh-wide drops
// traffic to unknown destinations; a Sidecar's own policy overrides it.
func TestMeshConfigOutboundTrafficPolicy(t *testing.T) {
	unknown := envoysim.Request{IP: "192.0.2.7", Port: 80, Authority: "unknown.example", Method: "GET", Path: "/"}
	passes := func(snap *mesh.Snapshot, key proxy.Key) bool {
		r := envoysim.New(Envoy(snap, key).Resources).Do(unknown)
		pass := func(d envoysim.Destination) bool { return d.Name == "PassthroughCluster" }
		return slices.ContainsFunc(r.Clusters, pass) || slices.ContainsFunc(r.TCP, pass)
	}
	if !passes(meshSnapshot(t, "", ""), reviewsKey) {
		t.Fatal("without a MeshConfig, unknown destinations must pass (ALLOW_ANY)")
	}
	if passes(meshSnapshot(t, "outboundTrafficPolicy: {mode: REGISTRY_ONLY}", ""), reviewsKey) {
		t.Error("REGISTRY_ONLY mesh-wide: unknown destinations must not pass")
	}
	// shop gets a Sidecar that says ALLOW_ANY: it wins over the mesh's.
	sc := "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: default, namespace: shop}\nspec: {outboundTrafficPolicy: {mode: ALLOW_ANY}}\n"
	if !passes(meshSnapshot(t, "outboundTrafficPolicy: {mode: REGISTRY_ONLY}", sc), reviewsKey) {
		t.Error("a Sidecar's ALLOW_ANY must override the mesh's REGISTRY_ONLY")
	}
}

// TestMeshConfigAutoMTLS: enableAutoMtls false leaves clusters without a
// tls setting in plain text.
func TestMeshConfigAutoMTLS(t *testing.T) {
	const ratings = "outbound|9080||ratings.shop.svc.cluster.local"
	if c := cluster(t, Envoy(meshSnapshot(t, "", ""), reviewsKey), ratings); len(c.GetTransportSocketMatches()) == 0 {
		t.Fatal("auto mTLS is on by default: ratings' cluster has no transport socket matches")
	}
	for _, cfg := range []string{"enableAutoMtls: false"} {
		c := cluster(t, Envoy(meshSnapshot(t, cfg, ""), reviewsKey), ratings)
		if len(c.GetTransportSocketMatches()) != 0 || c.GetTransportSocket() != nil {
			t.Errorf("%s: ratings' cluster still originates TLS", cfg)
		}
	}
	// An explicit ISTIO_MUTUAL (frontend's DestinationRule) is not auto mTLS.
	if c := cluster(t, Envoy(meshSnapshot(t, "enableAutoMtls: false", ""), reviewsKey), "outbound|8080||frontend.web.svc.cluster.local"); c.GetTransportSocket() == nil {
		t.Error("frontend's ISTIO_MUTUAL must stay with auto mTLS off")
	}
}

// TestMeshConfigConnectTimeout: the mesh's connectTimeout applies to
// every cluster a DestinationRule does not give one.
func TestMeshConfigConnectTimeout(t *testing.T) {
	dr := "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: ratings, namespace: shop}\nspec: {host: ratings, trafficPolicy: {connectionPool: {tcp: {connectTimeout: 1s}}}}\n"
	out := Envoy(meshSnapshot(t, "connectTimeout: 3s", dr), reviewsKey)
	for name, want := range map[string]time.Duration{
		"outbound|9080||reviews.shop.svc.cluster.local": 3 * time.Second,
		"outbound|9080||ratings.shop.svc.cluster.local": time.Second, // the DestinationRule's
		"PassthroughCluster":                            3 * time.Second,
		"inbound|9080||":                                3 * time.Second,
	} {
		if got := cluster(t, out, name).GetConnectTimeout().AsDuration(); got != want {
			t.Errorf("%s: connect timeout %s, want %s", name, got, want)
		}
	}
	if got := cluster(t, Envoy(meshSnapshot(t, "", ""), reviewsKey), "outbound|9080||reviews.shop.svc.cluster.local").GetConnectTimeout().AsDuration(); got != mesh.DefaultConnectTimeout {
		t.Errorf("default connect timeout %s, want %s", got, mesh.DefaultConnectTimeout)
	}
}

// TestMeshConfigLocalityLbSetting: the mesh's distribution applies to
// services whose DestinationRule sets no localityLbSetting, and a rule's
// own setting wins.
func TestMeshConfigLocalityLbSetting(t *testing.T) {
	const (
		cfg     = `localityLbSetting: {distribute: [{from: "us-east/*", to: {"us-east/*": 100}}]}`
		reviews = "outbound|9080||reviews.shop.svc.cluster.local"
		west    = "10.1.0.3" // reviews' endpoint in us-west
	)
	if got := addresses(assignment(t, Envoy(meshSnapshot(t, "", ""), reviewsKey), reviews)); !slices.Contains(got, west) {
		t.Fatalf("without a MeshConfig reviews' endpoints are %v; want us-west's among them", got)
	}
	// reviews has a DestinationRule without a localityLbSetting: the
	// mesh's distribution applies, us-west takes nothing.
	if got := addresses(assignment(t, Envoy(meshSnapshot(t, cfg, ""), reviewsKey), reviews)); slices.Contains(got, west) || len(got) == 0 {
		t.Errorf("under the mesh's distribution reviews' endpoints are %v; want us-east's only", got)
	}
	// A rule's own setting wins: one turning locality load balancing off.
	objs := strings.Replace(gentest.Mesh, "    loadBalancer: {simple: LEAST_REQUEST}", "    loadBalancer: {simple: LEAST_REQUEST, localityLbSetting: {enabled: false}}", 1)
	all, errs := meshconfig.DecodeYAML([]byte(objs), "c1.yaml")
	if len(errs) > 0 || objs == gentest.Mesh {
		t.Fatalf("fixture: %v", errs)
	}
	snap := (&mesh.Builder{MeshConfig: parseMeshConfig(t, cfg)}).Build("m", []mesh.ClusterInput{{Name: "c1", Synced: true, Connected: true, Objects: all}})
	if got := addresses(assignment(t, Envoy(snap, reviewsKey), reviews)); !slices.Contains(got, west) {
		t.Errorf("a DestinationRule turning locality load balancing off: reviews' endpoints are %v; want us-west's among them", got)
	}
}

// TestMeshConfigDefaultExportTo: objects and services that set no
// exportTo take the mesh's default.
func TestMeshConfigDefaultExportTo(t *testing.T) {
	has := func(out *Output, name string) bool { return gentest.ByName(out, typeurl.Cluster, name).Message != nil }
	const reviews = "outbound|9080||reviews.shop.svc.cluster.local"
	if !has(Envoy(meshSnapshot(t, "", ""), frontendKey), reviews) {
		t.Fatal("web's frontend sees shop's reviews by default")
	}
	if has(Envoy(meshSnapshot(t, `defaultServiceExportTo: ["."]`, ""), frontendKey), reviews) {
		t.Error(`defaultServiceExportTo ["."]: web's frontend must not see shop's reviews`)
	}
	// A service's own exportTo wins.
	se := "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: wide, namespace: web}\nspec: {hosts: [wide.web.svc.cluster.local], exportTo: ['*'], ports: [{number: 80, name: http, protocol: HTTP}], resolution: STATIC, endpoints: [{address: 10.1.9.9}]}\n"
	if out := Envoy(meshSnapshot(t, `defaultServiceExportTo: ["."]`, se), reviewsKey); !has(out, "outbound|80||wide.web.svc.cluster.local") || has(out, "outbound|8080||frontend.web.svc.cluster.local") {
		t.Error("a ServiceEntry's own exportTo ['*'] must override the mesh default")
	}
	// reviews' DestinationRule (subsets v1, v2) in shop: not exported to web.
	out := Envoy(meshSnapshot(t, `defaultDestinationRuleExportTo: ["."]`, ""), frontendKey)
	if has(out, "outbound|9080|v1|reviews.shop.svc.cluster.local") {
		t.Error(`defaultDestinationRuleExportTo ["."]: web must not get reviews' subsets`)
	}
	if !has(Envoy(meshSnapshot(t, "", ""), frontendKey), "outbound|9080|v1|reviews.shop.svc.cluster.local") {
		t.Error("by default web gets reviews' subsets")
	}
	for cfg, want := range map[string]int{"": 1, `defaultVirtualServiceExportTo: ["."]`: 0, `defaultVirtualServiceExportTo: [web]`: 1} {
		if got := len(scope.New(meshSnapshot(t, cfg, ""), frontendKey).VirtualServices("reviews.shop.svc.cluster.local")); got != want {
			t.Errorf("MeshConfig %q: web's frontend takes %d VirtualServices of reviews, want %d", cfg, got, want)
		}
	}
}

// TestMeshConfigClusterLocal: a cluster-local host's endpoints reach only
// proxies of their own cluster; other hosts are unchanged.
func TestMeshConfigClusterLocal(t *testing.T) {
	c2 := `apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: ratings-c2, namespace: shop}
spec: {address: 10.5.0.1, labels: {app: ratings}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: reviews-c2, namespace: shop}
spec: {address: 10.5.0.2, labels: {app: reviews, version: v1}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ratings-sel, namespace: shop}
spec: {hosts: [ratings.shop.svc.cluster.local], ports: [{number: 9080, name: http, protocol: HTTP}], resolution: STATIC, workloadSelector: {labels: {app: ratings}}}
`
	build := func(cfg string) *mesh.Snapshot {
		var in []mesh.ClusterInput
		for name, y := range map[string]string{"c1": gentest.Mesh, "c2": c2} {
			objs, errs := meshconfig.DecodeYAML([]byte(y), name+".yaml")
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			in = append(in, mesh.ClusterInput{Name: name, Synced: true, Connected: true, Objects: objs})
		}
		return (&mesh.Builder{MeshConfig: parseMeshConfig(t, cfg)}).Build("m", in)
	}
	const ratings = "outbound|9080||ratings.shop.svc.cluster.local"
	key := reviewsKey
	key.Cluster = "c1"
	all := addresses(assignment(t, Envoy(build(""), key), ratings))
	if !slices.Contains(all, "10.5.0.1") {
		t.Fatalf("the fixture does not merge c2's ratings endpoint: %v; the cluster-local checks below need it", all)
	}
	local := build("serviceSettings: [{settings: {clusterLocal: true}, hosts: [ratings.shop.svc.cluster.local]}]")
	if got := addresses(assignment(t, Envoy(local, key), ratings)); slices.Contains(got, "10.5.0.1") || len(got) == 0 {
		t.Errorf("a c1 proxy gets %v of cluster-local ratings; want c1's endpoints only", got)
	}
	key.Cluster = "c2"
	if got := addresses(assignment(t, Envoy(local, key), ratings)); !slices.Equal(got, []string{"10.5.0.1"}) {
		t.Errorf("a c2 proxy gets %v of cluster-local ratings; want [10.5.0.1]", got)
	}
	key.Cluster = ""
	if got := addresses(assignment(t, Envoy(local, key), ratings)); len(got) != 0 {
		t.Errorf("a proxy of no known cluster gets %v of cluster-local ratings; want none", got)
	}
	// Proxyless clients: the same, by their cluster.
	for cl, want := range map[string]bool{"c1": false, "c2": true} {
		out := GRPCFor(local, GRPCClient{Cluster: cl})
		if got := addresses(assignment(t, out, ratings)); slices.Contains(got, "10.5.0.1") != want {
			t.Errorf("proxyless client of %s gets %v of cluster-local ratings", cl, got)
		}
	}
}

// TestMeshConfigProxyless: proxyless clients get the trust domain aliases
// in the SAN check of ISTIO_MUTUAL clusters, and the mesh's locality
// default in their assignments.
func TestMeshConfigProxyless(t *testing.T) {
	const frontend = "outbound|8080||frontend.web.svc.cluster.local"
	sans := func(cfg string) []string {
		ctx := gentest.UpstreamTLS(t, cluster(t, GRPC(meshSnapshot(t, cfg, "")), frontend))
		var out []string
		//lint:ignore SA1019 proxyless clusters carry match_subject_alt_names (grpc-go reads only those)
		for _, m := range ctx.GetCommonTlsContext().GetValidationContext().GetMatchSubjectAltNames() {
			out = append(out, m.GetPrefix())
		}
		return out
	}
	if got := sans(""); !slices.Equal(got, []string{"spiffe://cluster.local/"}) {
		t.Errorf("without aliases: SAN prefixes %v", got)
	}
	if got := sans("trustDomainAliases: [old.example]"); !slices.Equal(got, []string{"spiffe://cluster.local/", "spiffe://old.example/"}) {
		t.Errorf("with alias old.example: SAN prefixes %v", got)
	}
	snap := meshSnapshot(t, `localityLbSetting: {distribute: [{from: "us-east/*", to: {"us-east/*": 100}}]}`, "")
	if !GRPCClientReads(snap).Locality {
		t.Fatal("a mesh-wide distribution must make proxyless assignments read the client's locality")
	}
	east := GRPCClient{Locality: mesh.ParseLocality("us-east/a")}
	const reviews = "outbound|9080||reviews.shop.svc.cluster.local"
	if got := addresses(assignment(t, GRPCFor(meshSnapshot(t, "", ""), east), reviews)); !slices.Contains(got, "10.1.0.3") {
		t.Fatalf("without a MeshConfig a us-east client gets %v; want us-west's 10.1.0.3 among them", got)
	}
	if got := addresses(assignment(t, GRPCFor(snap, east), reviews)); slices.Contains(got, "10.1.0.3") || len(got) == 0 {
		t.Errorf("under the mesh's distribution (us-east only) a us-east client gets %v", got)
	}
}
