package cache_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/cache"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
	"github.com/navemesh/nave/xds/pushctx"
)

// localityServices is n gRPC services with one endpoint in each of
// localities regions (r0/z1…), each with a DestinationRule whose
// outlierDetection turns on failover by proximity: every assignment
// depends on the client's locality.
func localityServices(tb testing.TB, n, localities int) []mesh.ClusterInput {
	tb.Helper()
	var b strings.Builder
	for i := range n {
		h := fmt.Sprintf("svc-%d.ns-%d.svc.cluster.local", i, i%10)
		fmt.Fprintf(&b, `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: svc-%[1]d, namespace: ns-%[2]d}
spec:
  hosts: [%[3]s]
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  endpoints:
`, i, i%10, h)
		for l := range localities {
			fmt.Fprintf(&b, "  - {address: 10.%d.%d.%d, locality: r%d/z1}\n", i/250, i%250, l+1, l)
		}
		fmt.Fprintf(&b, `---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: svc-%[1]d, namespace: ns-%[2]d}
spec:
  host: %[3]s
  trafficPolicy: {outlierDetection: {consecutive5xxErrors: 5}}
`, i, i%10, h)
	}
	objs, errs := meshconfig.DecodeYAML([]byte(b.String()), "bench.yaml")
	if len(errs) > 0 {
		tb.Fatal(errs)
	}
	return []mesh.ClusterInput{{Name: "c1", Connected: true, Synced: true, Objects: objs}}
}

// noPublisher is a cache.Publisher for benchmarks that hand the cache
// States themselves.
type noPublisher struct{}

func (noPublisher) Current(string) (*pushctx.State, <-chan struct{}) { return nil, nil }
func (noPublisher) Watch(string) func()                              { return func() {} }
func (noPublisher) States() []*pushctx.State                         { return nil }

// proxylessEDSBench returns a step generating a new State's proxyless
// resources for one client in each of `localities` localities (and the
// mesh-wide ones they start from), alternating between two equal
// snapshots so that each State generates: from scratch (diff.Config), or
// only host's endpoints (host != ""). The first State is generated
// before it returns and checked.
func proxylessEDSBench(tb testing.TB, services, localities int, host string) (step func()) {
	tb.Helper()
	in := localityServices(tb, services, localities)
	snaps := [2]*mesh.Snapshot{mesh.Build("m", in), mesh.Build("m", in)}
	keys := make([]proxy.Key, localities)
	for l := range keys {
		keys[l] = proxy.Key{Type: proxy.GRPC, Mesh: "m", Locality: mesh.Locality{Region: fmt.Sprintf("r%d", l), Zone: "z1"}}
	}
	c := cache.New(noPublisher{}, cache.Options{})
	version := uint64(1)
	generate := func(d mesh.Diff) *cache.Entry {
		e := c.Entry(&pushctx.State{Mesh: "m", Version: version, Snapshot: snaps[version%2], Diff: d})
		version++
		for _, k := range keys {
			e.ProxylessFor(k)
		}
		return e
	}
	e := generate(mesh.Diff{Config: true}) // the base of an endpoint-only step
	for l, k := range keys {
		eds := e.ProxylessFor(k).Resources[typeurl.Endpoint]
		if len(eds) != services {
			tb.Fatalf("%d assignments, want %d", len(eds), services)
		}
		if got := priorities(tb, e.ProxylessFor(k), "outbound|7070||svc-0.ns-0.svc.cluster.local"); !strings.HasPrefix(got, fmt.Sprintf("r%d:0 ", l)) {
			tb.Fatalf("client in r%d: priorities %s, want its own region first", l, got)
		}
	}
	diff := mesh.Diff{Config: true}
	if host != "" {
		diff = mesh.Diff{Hosts: map[string]bool{host: true}}
	}
	return func() { generate(diff) }
}

// BenchmarkProxylessEDS measures proxyless EDS per client locality: a
// State's mesh-wide proxyless resources and the assignments of clients
// in 1 or 10 localities, for 1,000 services whose every assignment
// depends on the client's locality; from scratch (a config change), and
// after one service's endpoints changed.
func BenchmarkProxylessEDS(b *testing.B) {
	for _, localities := range []int{1, 10} {
		for _, c := range []struct{ mode, host string }{{"full", ""}, {"endpoints", "svc-7.ns-7.svc.cluster.local"}} {
			b.Run(fmt.Sprintf("%s/services=1000/localities=%d", c.mode, localities), func(b *testing.B) {
				step := proxylessEDSBench(b, 1000, localities, c.host)
				b.ReportAllocs()
				for b.Loop() {
					step()
				}
			})
		}
	}
}

// TestBenchmarkProxylessEDSRunsOnce is BenchmarkProxylessEDS's test
// twin: it runs each case once, small.
func TestBenchmarkProxylessEDSRunsOnce(t *testing.T) {
	for _, host := range []string{"", "svc-7.ns-7.svc.cluster.local"} {
		proxylessEDSBench(t, 20, 3, host)()
	}
}
