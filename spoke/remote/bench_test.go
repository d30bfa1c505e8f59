package remote

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/meshconfig"
)

// loadMesh is the remote part of the load benchmark's mesh
// (docs/load-benchmark.md): services × endpoints in cluster c2, as Watch
// sends them — a ServiceEntry per service and a WorkloadEntry per
// endpoint.
func loadMesh(tb testing.TB, services, endpoints int) []*discoveryv3.DeltaDiscoveryResponse {
	tb.Helper()
	var b strings.Builder
	for s := range services {
		fmt.Fprintf(&b, `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: svc-%d, namespace: ns-%d}
spec:
  hosts: [svc-%d.ns-%d.svc.cluster.local]
  ports: [{number: 8080, name: http, protocol: HTTP}]
  resolution: STATIC
  workloadSelector: {labels: {app: svc-%d}}
`, s, s%20, s, s%20, s)
		for e := range endpoints {
			fmt.Fprintf(&b, `---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: svc-%d-%d, namespace: ns-%d}
spec: {address: 10.%d.%d.%d, labels: {app: svc-%d, version: v1}, locality: region/zone-%d}
`, s, e, s%20, s/250, s%250, e+1, s, e%3)
		}
	}
	objs, errs := meshconfig.DecodeYAML([]byte(b.String()), "load.yaml")
	if len(errs) > 0 {
		tb.Fatal(errs[0])
	}
	byType := map[string]*discoveryv3.DeltaDiscoveryResponse{}
	for _, o := range objs {
		r := byType[o.Kind.TypeURL]
		if r == nil {
			r = &discoveryv3.DeltaDiscoveryResponse{TypeUrl: o.Kind.TypeURL}
			byType[o.Kind.TypeURL] = r
		}
		res, err := protocol.EncodeRemote("c2", o)
		if err != nil {
			tb.Fatal(err)
		}
		r.Resources = append(r.Resources, res)
	}
	out := []*discoveryv3.DeltaDiscoveryResponse{{TypeUrl: protocol.ClusterStatusTypeURL, Resources: []*discoveryv3.Resource{
		body(tb, "c2", &protocolv1.ClusterStatus{Cluster: "c2", Connected: true, Synced: true}, nil)}}}
	for _, r := range byType {
		out = append(out, r)
	}
	return out
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// benchmarkView applies the view, saves it and loads it back, reporting
// the heap the loaded view holds and the file's size.
func benchmarkView(b *testing.B, services, endpoints int) {
	resps := loadMesh(b, services, endpoints)
	path := filepath.Join(b.TempDir(), File)
	b.ResetTimer()
	for b.Loop() {
		v := New("m", "c1")
		for _, r := range resps {
			if rj := v.Apply(r); len(rj) > 0 {
				b.Fatal(rj[0])
			}
		}
		v.MarkComplete()
		if err := v.Save(path); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	before := heapInUse()
	loaded := New("m", "c1")
	if err := loaded.Load(path); err != nil {
		b.Fatal(err)
	}
	held := heapInUse() - before
	data, _ := loaded.Encode()
	cs := loaded.Clusters()
	if len(cs) != 1 || len(cs[0].Objects) != services*(1+endpoints) {
		b.Fatalf("clusters = %d, objects %d", len(cs), len(cs[0].Objects))
	}
	b.ReportMetric(float64(held)/(1<<20), "MB-held")
	b.ReportMetric(float64(len(data))/(1<<20), "MB-file")
	runtime.KeepAlive(loaded)
}

// benchmarkSave saves a complete view of services × endpoints (the
// allocations are the save's).
func benchmarkSave(b *testing.B, services, endpoints int) {
	v := New("m", "c1")
	for _, r := range loadMesh(b, services, endpoints) {
		if rj := v.Apply(r); len(rj) > 0 {
			b.Fatal(rj[0])
		}
	}
	v.MarkComplete()
	path := filepath.Join(b.TempDir(), File)
	b.ReportAllocs()
	for b.Loop() {
		if err := v.Save(path); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkViewSaveBenchmarkMesh: one save of 1,000 services × 15
// endpoints.
func BenchmarkViewSaveBenchmarkMesh(b *testing.B) { benchmarkSave(b, 1000, 15) }

// BenchmarkViewLoadBenchmarkMesh: 1,000 services × 15 endpoints.
func BenchmarkViewLoadBenchmarkMesh(b *testing.B) { benchmarkView(b, 1000, 15) }

// TestBenchmarksRunOnce is the benchmarks' test twin (a small mesh).
func TestBenchmarksRunOnce(t *testing.T) {
	for name, bench := range map[string]func(*testing.B, int, int){"view": benchmarkView, "save": benchmarkSave} {
		if r := testing.Benchmark(func(b *testing.B) { bench(b, 20, 3) }); r.N == 0 {
			t.Fatalf("the %s benchmark did not run", name)
		}
	}
}
