package envoy

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

var ldsSidecarKey = proxy.Key{Type: proxy.Sidecar, Mesh: "default", Namespace: "demo", Labels: "app=x", IPs: "10.0.0.1"}

var ldsRouterKey = proxy.Key{Type: proxy.Router, Mesh: "default", Namespace: "istio-system", Labels: "istio=ingressgateway", IPs: "10.0.9.9",
	SDSCluster: "sds-grpc"} // a gateway with its agent

func listeners(t *testing.T, yaml string, key proxy.Key) (map[string]*listenerv3.Listener, []mesh.Problem) {
	t.Helper()
	out := generate(gentest.Snapshot(t, map[string]string{"c1": yaml}), key)
	ls := map[string]*listenerv3.Listener{}
	for _, r := range out.Resources[typeurl.Listener] {
		l := r.Message.(*listenerv3.Listener)
		if r.Name != l.Name {
			t.Errorf("resource %q holds listener %q", r.Name, l.Name)
		}
		if _, dup := ls[r.Name]; dup {
			t.Errorf("listener %s generated twice", r.Name)
		}
		validateDeep(t, l)
		ls[r.Name] = l
	}
	return ls, out.Problems
}

// validateDeep runs ValidateAll on the listener and on every typed config
// inside it (ValidateAll does not look into Any).
func validateDeep(t *testing.T, l *listenerv3.Listener) {
	t.Helper()
	if err := l.ValidateAll(); err != nil {
		t.Errorf("listener %s: %v", l.Name, err)
	}
	check := func(a *anypb.Any) {
		m, err := a.UnmarshalNew()
		if err != nil {
			t.Fatalf("listener %s: %v", l.Name, err)
		}
		if err := m.(interface{ ValidateAll() error }).ValidateAll(); err != nil {
			t.Errorf("listener %s: %s: %v", l.Name, a.TypeUrl, err)
		}
		if hcm, ok := m.(*hcmv3.HttpConnectionManager); ok {
			for _, f := range hcm.HttpFilters {
				if err := f.ValidateAll(); err != nil {
					t.Errorf("listener %s: http filter %s: %v", l.Name, f.Name, err)
				}
			}
		}
	}
	for _, lf := range l.ListenerFilters {
		check(lf.GetTypedConfig())
	}
	for _, fc := range chains(l) {
		for _, f := range fc.Filters {
			check(f.GetTypedConfig())
		}
		if ts := fc.TransportSocket; ts != nil {
			check(ts.GetTypedConfig())
		}
	}
}

func chains(l *listenerv3.Listener) []*listenerv3.FilterChain {
	out := slices.Clone(l.FilterChains)
	if l.DefaultFilterChain != nil {
		out = append(out, l.DefaultFilterChain)
	}
	return out
}

func unpack[T proto.Message](t *testing.T, a *anypb.Any) T {
	t.Helper()
	m, err := a.UnmarshalNew()
	if err != nil {
		t.Fatal(err)
	}
	v, ok := m.(T)
	if !ok {
		t.Fatalf("typed config is %s", a.TypeUrl)
	}
	return v
}

// only returns the single filter of a chain.
func only(t *testing.T, fc *listenerv3.FilterChain) *listenerv3.Filter {
	t.Helper()
	if fc == nil || len(fc.Filters) != 1 {
		t.Fatalf("chain %v: want exactly one filter", fc)
	}
	return fc.Filters[0]
}

// tcpDests renders a chain's tcp_proxy destinations as "cluster" or
// "cluster*weight,...".
func tcpDests(t *testing.T, fc *listenerv3.FilterChain) string {
	t.Helper()
	f := only(t, fc)
	if f.Name != TCPProxyFilter {
		t.Fatalf("filter %s, want tcp_proxy", f.Name)
	}
	tp := unpack[*tcpproxyv3.TcpProxy](t, f.GetTypedConfig())
	if c := tp.GetCluster(); c != "" {
		return c
	}
	var parts []string
	for _, c := range tp.GetWeightedClusters().GetClusters() {
		parts = append(parts, c.Name+"*"+portString(c.Weight))
	}
	return strings.Join(parts, ",")
}

func rdsName(t *testing.T, fc *listenerv3.FilterChain) (string, *hcmv3.HttpConnectionManager) {
	t.Helper()
	f := only(t, fc)
	if f.Name != build.HTTPConnectionManagerFilter {
		t.Fatalf("filter %s, want HCM", f.Name)
	}
	hcm := unpack[*hcmv3.HttpConnectionManager](t, f.GetTypedConfig())
	return hcm.GetRds().GetRouteConfigName(), hcm
}

func ldsNames(ls map[string]*listenerv3.Listener) []string {
	var out []string
	for n := range ls {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func ldsHasProblem(ps []mesh.Problem, resource, reason string) bool {
	for _, p := range ps {
		if strings.Contains(p.Resource, resource) && strings.Contains(p.Reason, reason) {
			return true
		}
	}
	return false
}

func TestListenersDeterministic(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		key  proxy.Key
	}{{ldsMesh, ldsSidecarKey}, {gatewayMesh, ldsRouterKey}} {
		s := gentest.Snapshot(t, map[string]string{"c1": tc.yaml})
		first := generate(s, tc.key)
		for range 5 {
			again := generate(s, tc.key)
			a, b := first.Resources[typeurl.Listener], again.Resources[typeurl.Listener]
			if len(a) != len(b) {
				t.Fatalf("%d then %d listeners", len(a), len(b))
			}
			for i := range a {
				ma, _ := proto.MarshalOptions{Deterministic: true}.Marshal(a[i].Message)
				mb, _ := proto.MarshalOptions{Deterministic: true}.Marshal(b[i].Message)
				if a[i].Name != b[i].Name || string(ma) != string(mb) {
					t.Fatalf("listener %s differs between runs", a[i].Name)
				}
			}
			if !slices.Equal(first.Problems, again.Problems) {
				t.Fatalf("problems differ: %v vs %v", first.Problems, again.Problems)
			}
		}
	}
}

func TestProxylessGetsNoEnvoyListeners(t *testing.T) {
	ls, _ := listeners(t, ldsMesh, proxy.Key{Type: proxy.GRPC, Mesh: "default", Namespace: "demo"})
	if len(ls) != 0 {
		t.Errorf("listeners %v", ldsNames(ls))
	}
}

// ldsBenchConfig is n services: half HTTP on one of 5 ports, a quarter TCP
// with a VIP and a tcp route split, a quarter TLS on 443.
func ldsBenchConfig(tb testing.TB, n int) *mesh.Snapshot {
	tb.Helper()
	var b strings.Builder
	for i := range n {
		h := "svc-" + strconv.Itoa(i) + ".ns-" + strconv.Itoa(i%10) + ".svc.cluster.local"
		ns := "ns-" + strconv.Itoa(i%10)
		switch i % 4 {
		case 0, 1:
			b.WriteString("---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: s" + strconv.Itoa(i) + ", namespace: " + ns + "}\nspec:\n  hosts: [" + h +
				"]\n  ports: [{number: " + strconv.Itoa(8080+i%5) + ", name: http, protocol: HTTP}]\n  resolution: STATIC\n  endpoints: [{address: 10.1." + strconv.Itoa(i/250) + "." + strconv.Itoa(i%250) + "}]\n")
		case 2:
			b.WriteString("---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: s" + strconv.Itoa(i) + ", namespace: " + ns + "}\nspec:\n  hosts: [" + h +
				"]\n  addresses: [240.1." + strconv.Itoa(i/250) + "." + strconv.Itoa(i%250) + "]\n  ports: [{number: 5432, name: tcp, protocol: TCP}]\n  resolution: STATIC\n  endpoints: [{address: 10.1." + strconv.Itoa(i/250) + "." + strconv.Itoa(i%250) + "}]\n" +
				"---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: s" + strconv.Itoa(i) + ", namespace: " + ns + "}\nspec:\n  hosts: [" + h + "]\n  tcp:\n  - route:\n    - {destination: {host: " + h + "}, weight: 90}\n    - {destination: {host: " + h + ", port: {number: 5433}}, weight: 10}\n")
		case 3:
			b.WriteString("---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: s" + strconv.Itoa(i) + ", namespace: " + ns + "}\nspec:\n  hosts: [" + h +
				"]\n  ports: [{number: 443, name: tls, protocol: TLS}]\n  resolution: DNS\n")
		}
	}
	objs, errs := meshconfig.DecodeYAML([]byte(b.String()), "bench.yaml")
	if len(errs) > 0 {
		tb.Fatal(errs[0])
	}
	return mesh.Build("m", []mesh.ClusterInput{{Name: "c1", Synced: true, Connected: true, Objects: objs}})
}

// BenchmarkSidecarListeners measures generating and marshalling one
// sidecar's listeners.
func BenchmarkSidecarListeners(b *testing.B) {
	for _, n := range []int{100, 1000} {
		s := ldsBenchConfig(b, n)
		b.Run("services="+strconv.Itoa(n), func(b *testing.B) {
			benchListeners(b, s, ldsSidecarKey)
		})
	}
}

func benchListeners(b *testing.B, s *mesh.Snapshot, key proxy.Key) {
	b.ReportAllocs()
	var kb, count int
	for b.Loop() {
		kb, count = marshalListeners(b, s, key)
	}
	b.ReportMetric(float64(kb)/1024, "kb/msg")
	b.ReportMetric(float64(count), "resources/msg")
}

// marshalListeners generates and marshals a proxy's listeners once:
// bytes and resource count.
func marshalListeners(tb testing.TB, s *mesh.Snapshot, key proxy.Key) (int, int) {
	bytes, count := 0, 0
	for _, r := range Listeners(scope.New(s, key)) {
		m, err := proto.Marshal(r.Message)
		if err != nil {
			tb.Fatal(err)
		}
		bytes += len(m)
		count++
	}
	return bytes, count
}

// TestBenchmarkSidecarListeners runs the benchmark once so it cannot rot,
// and checks its config yields what the benchmark claims to measure.
func TestBenchmarkSidecarListeners(t *testing.T) {
	s := ldsBenchConfig(t, 20)
	ls := map[string]bool{}
	for _, r := range Listeners(scope.New(s, ldsSidecarKey)) {
		ls[r.Name] = true
	}
	// 5 HTTP ports, 5 TCP VIPs, 443, virtualOutbound, virtualInbound
	if len(ls) != 13 || !ls["240.1.0.2_5432"] || !ls["0.0.0.0_443"] {
		t.Errorf("listeners %v", ls)
	}
	if _, n := marshalListeners(t, s, ldsSidecarKey); n != len(ls) {
		t.Errorf("benchmark body marshalled %d listeners, want %d", n, len(ls))
	}
}
