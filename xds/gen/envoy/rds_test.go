package envoy

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/gen/routes"
	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

const (
	reviews = "reviews.shop.svc.cluster.local"
	ratings = "ratings.shop.svc.cluster.local"
	details = "details.other.svc.cluster.local"
)

// rdsBase: reviews (HTTP 9080, VIP 10.0.0.10, subsets v1/v2), ratings
// (HTTP 9080 and GRPC 9090, same VIP as reviews), db (TCP), details in
// another namespace.
const rdsBase = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: reviews, namespace: shop}
spec:
  hosts: [reviews.shop.svc.cluster.local]
  addresses: [10.0.0.10]
  ports: [{number: 9080, name: http, protocol: HTTP}]
  resolution: STATIC
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ratings, namespace: shop}
spec:
  hosts: [ratings.shop.svc.cluster.local]
  addresses: [10.0.0.10]
  ports: [{number: 9080, name: http, protocol: HTTP}, {number: 9090, name: grpc, protocol: GRPC}]
  resolution: STATIC
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: shop}
spec:
  hosts: [db.shop.svc.cluster.local]
  ports: [{number: 3306, name: tcp, protocol: TCP}]
  resolution: STATIC
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: details, namespace: other}
spec:
  hosts: [details.other.svc.cluster.local]
  ports: [{number: 9080, name: http, protocol: HTTP}]
  resolution: STATIC
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: shop}
spec:
  host: reviews
  subsets: [{name: v1, labels: {version: v1}}, {name: v2, labels: {version: v2}}]
`

var rdsSidecarKey = proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "shop", Labels: "app=productpage\nversion=v1"}

// rdsOut generates for key and checks that every resource validates.
func rdsOut(t *testing.T, s *mesh.Snapshot, key proxy.Key) *build.Output {
	t.Helper()
	out := generate(s, key)
	gentest.ValidateAll(t, out)
	return out
}

func routeConfig(t *testing.T, out *build.Output, name string) *routev3.RouteConfiguration {
	t.Helper()
	rc, _ := gentest.ByName(out, typeurl.Route, name).Message.(*routev3.RouteConfiguration)
	if rc == nil {
		var names []string
		for _, r := range out.Resources[typeurl.Route] {
			names = append(names, r.Name)
		}
		t.Fatalf("no route configuration %q; have %v", name, names)
	}
	return rc
}

func vhost(t *testing.T, rc *routev3.RouteConfiguration, name string) *routev3.VirtualHost {
	t.Helper()
	for _, vh := range rc.GetVirtualHosts() {
		if vh.GetName() == name {
			return vh
		}
	}
	t.Fatalf("route configuration %s has no virtual host %q", rc.GetName(), name)
	return nil
}

// reviewsRoutes returns the routes of reviews on 9080 as the sidecar sees them.
func reviewsRoutes(t *testing.T, out *build.Output) []*routev3.Route {
	t.Helper()
	return vhost(t, routeConfig(t, out, "9080"), reviews+":9080").GetRoutes()
}

func rdsHasProblem(out *build.Output, resource, field, reason string) bool {
	for _, p := range out.Problems {
		if strings.Contains(p.Resource, resource) && p.Field == field && strings.Contains(p.Reason, reason) {
			return true
		}
	}
	return false
}

func wantProblem(t *testing.T, out *build.Output, resource, field, reason string) {
	t.Helper()
	if !rdsHasProblem(out, resource, field, reason) {
		t.Errorf("missing problem %s %s %q; have %+v", resource, field, reason, out.Problems)
	}
}

func wantRoutes(t *testing.T, rs []*routev3.Route, n int) {
	t.Helper()
	if len(rs) != n {
		t.Fatalf("routes = %d, want %d: %v", len(rs), n, rs)
	}
}

func vsYAML(name, body string) string {
	return "---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: " + name + ", namespace: shop}\nspec:\n" + body
}

// sidecarResource is a Sidecar in shop that sees everything, with the
// given outbound traffic policy mode.
func sidecarResource(mode string) string {
	return `---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: shop}
spec:
  egress: [{hosts: ["*/*"]}]
  outboundTrafficPolicy: {mode: ` + mode + `}
`
}

func TestSidecarRouteConfigs(t *testing.T) {
	// The Sidecar states ALLOW_ANY explicitly; an unset outbound policy
	// means the same (scope.View.AllowAny).
	out := rdsOut(t, gentest.Snapshot(t, map[string]string{"c1": rdsBase + sidecarResource("ALLOW_ANY")}), rdsSidecarKey)
	var names []string
	for _, r := range out.Resources[typeurl.Route] {
		names = append(names, r.Name)
	}
	if !slices.Equal(names, []string{"9080", "9090"}) {
		t.Fatalf("route configurations = %v, want 9080 and 9090 (no TCP port)", names)
	}
	rc := routeConfig(t, out, "9080")
	if rc.GetValidateClusters() == nil || rc.GetValidateClusters().GetValue() {
		t.Errorf("validate_clusters = %v, want false", rc.GetValidateClusters())
	}
	var vhosts []string
	for _, vh := range rc.GetVirtualHosts() {
		vhosts = append(vhosts, vh.GetName())
	}
	if want := []string{details + ":9080", ratings + ":9080", reviews + ":9080", AllowAnyVirtualHost}; !slices.Equal(vhosts, want) {
		t.Fatalf("virtual hosts = %v, want %v", vhosts, want)
	}

	// Same namespace: every short form; the shared VIP goes to the first
	// service by hostname (ratings), never twice.
	if got, want := vhost(t, rc, ratings+":9080").GetDomains(), []string{
		ratings, ratings + ":9080", "ratings", "ratings:9080", "ratings.shop", "ratings.shop:9080",
		"ratings.shop.svc", "ratings.shop.svc:9080", "ratings.shop.svc.cluster", "ratings.shop.svc.cluster:9080",
		"10.0.0.10", "10.0.0.10:9080"}; !slices.Equal(got, want) {
		t.Errorf("ratings domains = %v, want %v", got, want)
	}
	if got := vhost(t, rc, reviews+":9080").GetDomains(); slices.Contains(got, "10.0.0.10") || !slices.Contains(got, "reviews") {
		t.Errorf("reviews domains = %v: want short names, not ratings' VIP", got)
	}
	// Another namespace: from name.ns on.
	if got, want := vhost(t, rc, details+":9080").GetDomains(), []string{
		details, details + ":9080", "details.other", "details.other:9080", "details.other.svc", "details.other.svc:9080",
		"details.other.svc.cluster", "details.other.svc.cluster:9080"}; !slices.Equal(got, want) {
		t.Errorf("details domains = %v, want %v", got, want)
	}
	seen := map[string]bool{}
	for _, vh := range rc.GetVirtualHosts() {
		for _, d := range vh.GetDomains() {
			if seen[d] {
				t.Errorf("domain %s twice", d)
			}
			seen[d] = true
		}
	}

	// Default route: the port's cluster, no timeout, Istio's default retries.
	rs := vhost(t, rc, reviews+":9080").GetRoutes()
	wantRoutes(t, rs, 1)
	ra := rs[0].GetRoute()
	if rs[0].GetMatch().GetPrefix() != "/" || ra.GetCluster() != build.ClusterName(reviews, 9080, "") || ra.GetTimeout() == nil || ra.GetTimeout().AsDuration() != 0 {
		t.Errorf("default route = %v", rs[0])
	}
	if rp := ra.GetRetryPolicy(); rp.GetNumRetries().GetValue() != 2 || rp.GetRetryOn() != routes.DefaultRetryOn {
		t.Errorf("default retry policy = %v", rp)
	}
	allow := vhost(t, rc, AllowAnyVirtualHost)
	if !slices.Equal(allow.GetDomains(), []string{"*"}) || allow.GetRoutes()[0].GetRoute().GetCluster() != build.PassthroughCluster {
		t.Errorf("allow_any = %v", allow)
	}
	// The 9090 configuration has only ratings' GRPC port.
	rc9090 := routeConfig(t, out, "9090")
	if n := len(rc9090.GetVirtualHosts()); n != 2 {
		t.Errorf("9090 virtual hosts = %d, want ratings + allow_any", n)
	}

	// REGISTRY_ONLY: block_all answers 502.
	out = rdsOut(t, gentest.Snapshot(t, map[string]string{"c1": rdsBase + sidecarResource("REGISTRY_ONLY")}), rdsSidecarKey)
	block := vhost(t, routeConfig(t, out, "9080"), BlockAllVirtualHost)
	if block.GetRoutes()[0].GetDirectResponse().GetStatus() != 502 || !slices.Equal(block.GetDomains(), []string{"*"}) {
		t.Errorf("block_all = %v", block)
	}
}

func TestEnvoyRoutesDeterministic(t *testing.T) {
	y := map[string]string{"c1": rdsBase + gatewayYAML, "c2": rdsBase}
	for _, key := range []proxy.Key{rdsSidecarKey, routerKey} {
		a := generate(gentest.Snapshot(t, y), key)
		b := generate(gentest.Snapshot(t, y), key)
		ra, rb := a.Resources[typeurl.Route], b.Resources[typeurl.Route]
		if len(ra) == 0 || len(ra) != len(rb) {
			t.Fatalf("%s: %d vs %d route configurations", key.Type, len(ra), len(rb))
		}
		for i := range ra {
			ma, _ := proto.MarshalOptions{Deterministic: true}.Marshal(ra[i].Message)
			mb, _ := proto.MarshalOptions{Deterministic: true}.Marshal(rb[i].Message)
			if ra[i].Name != rb[i].Name || string(ma) != string(mb) {
				t.Errorf("%s: route configuration %s differs between runs", key.Type, ra[i].Name)
			}
		}
	}
}

// BenchmarkEnvoyRoutes measures generating and marshalling a sidecar's
// route configurations (gentest.DemoServices: every service has a VirtualService).
func BenchmarkEnvoyRoutes(b *testing.B) {
	key := proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "ns-0", Labels: "app=client"}
	for _, n := range []int{100, 1000} {
		snap := mesh.Build("m", gentest.DemoServices(b, n))
		b.Run("services="+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			var bytes, resources int
			for b.Loop() {
				bytes, resources = 0, 0
				for _, r := range Routes(scope.New(snap, key)) {
					m, err := proto.Marshal(r.Message)
					if err != nil {
						b.Fatal(err)
					}
					bytes += len(m)
					resources++
				}
			}
			b.ReportMetric(float64(bytes)/1024, "kb/msg")
			b.ReportMetric(float64(resources), "resources/msg")
		})
	}
}

// TestEnvoyRoutesBenchmarkOnce is BenchmarkEnvoyRoutes' test twin.
func TestEnvoyRoutesBenchmarkOnce(t *testing.T) {
	key := proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "ns-0", Labels: "app=client"}
	v := scope.New(mesh.Build("m", gentest.DemoServices(t, 50)), key)
	rs := Routes(v)
	if len(rs) != 1 {
		t.Fatalf("route configurations = %d, want 1 (port 7070)", len(rs))
	}
	if n := len(rs[0].Message.(*routev3.RouteConfiguration).GetVirtualHosts()); n != 51 {
		t.Fatalf("virtual hosts = %d, want 50 + catch-all", n)
	}
	if p := v.Problems().List(); len(p) != 0 {
		t.Fatalf("problems: %+v", p)
	}
}
