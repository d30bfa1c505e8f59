package server

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/navemesh/nave/internal/testwait"
)

// footprint is what a hub holds: heap in use after a GC, goroutine
// stacks, goroutines.
type footprint struct {
	heap, stacks uint64
	goroutines   int
}

func measure() footprint {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return footprint{heap: ms.HeapInuse, stacks: ms.StackInuse, goroutines: runtime.NumGoroutine()}
}

// perMesh is what each of n meshes added from before to after: bytes
// (heap and stacks) and goroutines.
func perMesh(before, after footprint, n int) (bytes, goroutines float64) {
	d := int64(after.heap+after.stacks) - int64(before.heap+before.stacks)
	return float64(d) / float64(n), float64(after.goroutines-before.goroutines) / float64(n)
}

// idleMeshes starts a TLS hub, creates n meshes through the tenants
// Service, waits until each is served (its CA loaded) and returns the hub
// and its footprint before and after.
func idleMeshes(tb testing.TB, n int) (h *tlsHub, before, after footprint) {
	tb.Helper()
	h = startTLSHubIn(tb, tb.TempDir())
	before = measure()
	for i := range n {
		name := fmt.Sprintf("idle-%04d", i)
		doc := fmt.Sprintf("apiVersion: nave.io/v1alpha1\nkind: Mesh\nmetadata: {name: %s}\nspec: {trustDomain: %s.example}\n", name, name)
		if _, err := h.svc.Create(tb.Context(), []byte(doc)); err != nil {
			tb.Fatalf("create mesh %s: %v", name, err)
		}
	}
	testwait.For(tb, testwait.Timeout, func() error {
		for i := range n {
			name := fmt.Sprintf("idle-%04d", i)
			if _, err := h.sec.authority.TrustDomain(name); err != nil {
				return fmt.Errorf("mesh %s not served: %w", name, err)
			}
		}
		return nil
	})
	return h, before, measure()
}

// TestIdleMeshes runs BenchmarkIdleMeshes' setup once at a small N: every
// created mesh is served; once they are all deleted and purged, the hub
// is back to the goroutines it had before them (the engine forgot them).
func TestIdleMeshes(t *testing.T) {
	const n = 20
	h, before, after := idleMeshes(t, n)
	b, g := perMesh(before, after, n)
	t.Logf("%d idle meshes: %.0f B/mesh, %.1f goroutines/mesh (heap+stacks %d → %d B)", n, b, g, before.heap+before.stacks, after.heap+after.stacks)
	if after.goroutines < before.goroutines+n {
		t.Fatalf("%d goroutines with %d meshes served, %d before: none per mesh?", after.goroutines, n, before.goroutines)
	}
	for i := range n {
		if _, err := h.svc.Delete(t.Context(), fmt.Sprintf("idle-%04d", i), false); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Until(t, "the deleted meshes purged", func() bool { return len(h.meshes.List()) == 1 }) // the seeded default
	testwait.Until(t, "the deleted meshes' goroutines ended", func() bool { return runtime.NumGoroutine() <= before.goroutines })
}

// BenchmarkIdleMeshes measures a hub's memory per idle mesh (issue 30's
// aim: 1,000 idle meshes in < 500 MiB): the heap in use, after a GC, of a
// TLS hub serving 1,000 meshes that have no spoke and no proxy, with its
// goroutines' stacks, less that of the hub before them.
//
//	go test -run '^$' -bench BenchmarkIdleMeshes -benchtime 1x ./hub/server/
func BenchmarkIdleMeshes(b *testing.B) {
	const n = 1000
	for b.Loop() {
		_, before, after := idleMeshes(b, n)
		bytes, goroutines := perMesh(before, after, n)
		b.ReportMetric(bytes, "B/mesh")
		b.ReportMetric(goroutines, "goroutines/mesh")
		b.ReportMetric(float64(after.heap+after.stacks)/(1<<20), "MiB-total")
	}
}
