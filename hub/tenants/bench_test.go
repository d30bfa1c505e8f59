package tenants_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/hub/tenants"
)

// benchmarkRefresh measures one replica's steady refresh of n idle
// meshes in a dir store (nothing changed: what every replica does every
// state.meshRefreshInterval) and the heap the service holds for them.
func benchmarkRefresh(b *testing.B, n int) {
	dir := b.TempDir()
	store, err := tenants.OpenStore(ca.StoreDir, dir, "", "")
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		name := fmt.Sprintf("tenant-%04d", i)
		doc := spec(name, name+".example", "meshConfig: {rootNamespace: "+name+"-system, outboundTrafficPolicy: {mode: REGISTRY_ONLY}}")
		if err := os.WriteFile(filepath.Join(dir, tenants.StateSubdir, name+".yaml"), doc, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	s, err := tenants.New(b.Context(), store, tenants.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.Refresh(b.Context()); err != nil { // the second read takes them up
		b.Fatal(err)
	}
	if got := len(s.Registry().Names()); got != n {
		b.Fatalf("%d meshes, want %d", got, n)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	held := float64(after.HeapInuse-min(before.HeapInuse, after.HeapInuse)) / float64(n) / 1024
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Refresh(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/refresh")
	b.ReportMetric(held, "KiB-held/mesh")
	runtime.KeepAlive(s)
}

// BenchmarkRefresh1000IdleMeshes: the 1,000 idle meshes.
func BenchmarkRefresh1000IdleMeshes(b *testing.B) { benchmarkRefresh(b, 1000) }

// TestBenchmarksRunOnce is the benchmarks' test twin (a few meshes).
func TestBenchmarksRunOnce(t *testing.T) {
	r := testing.Benchmark(func(b *testing.B) { benchmarkRefresh(b, 5) })
	if r.N == 0 {
		t.Fatal("the benchmark did not run")
	}
}
