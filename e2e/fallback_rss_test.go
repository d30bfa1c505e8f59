package e2e

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/navemesh/nave/e2e/load"
	"github.com/navemesh/nave/internal/testwait"
)

// The remote view's scale: the load benchmark's mesh, 1,000 services × 15
// endpoints, all in the other cluster.
var (
	fallbackServices  = flag.Int("fallback.services", 1000, "fallback RSS benchmark: services in the other cluster")
	fallbackEndpoints = flag.Int("fallback.endpoints", 15, "fallback RSS benchmark: endpoints per service")
)

// writeBenchMesh writes, under dir, services ServiceEntries of endpoints
// WorkloadEntries each, as a spoke's files (100 services a file).
func writeBenchMesh(tb testing.TB, dir string, services, endpoints int) {
	tb.Helper()
	var b strings.Builder
	flush := func(n int) {
		if b.Len() == 0 {
			return
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("mesh-%04d.yaml", n)), []byte(b.String()), 0o644); err != nil {
			tb.Fatal(err)
		}
		b.Reset()
	}
	for i := range services {
		fmt.Fprintf(&b, `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: svc-%04d, namespace: bench}
spec:
  hosts: [svc-%04d.bench.svc.cluster.local]
  ports: [{number: 8080, name: grpc, protocol: GRPC}]
  location: MESH_INTERNAL
  resolution: STATIC
  workloadSelector: {labels: {app: svc-%04d}}
`, i, i, i)
		for j := range endpoints {
			fmt.Fprintf(&b, `---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: svc-%04d-%02d, namespace: bench}
spec:
  address: 10.%d.%d.%d
  ports: {grpc: 8080}
  labels: {app: svc-%04d}
`, i, j, 1+i/250, i%250, 1+j, i)
		}
		if (i+1)%100 == 0 {
			flush(i / 100)
		}
	}
	flush(services / 100)
}

// fallbackRSS is what runFallbackRSS measured of spoke a (MiB).
type fallbackRSS struct {
	Standby, Serving, Peak float64
	// StandbyAnon and StandbyFile split Standby: anonymous memory (the
	// Go heap and runtime) and the binary's file pages.
	StandbyAnon, StandbyFile float64
	Objects, Held            int
	Serve                    time.Duration
}

// runFallbackRSS runs a hub and two fallback spokes, b holding services ×
// endpoints, and measures spoke a's RSS holding b's part as its remote
// view while the hub serves (standby), and once it serves it, after the
// hub is killed, to a proxy watching every cluster and endpoint (serving;
// peak is VmHWM).
func runFallbackRSS(tb testing.TB, services, endpoints int) fallbackRSS {
	tb.Helper()
	dirA, dirB := tb.TempDir(), tb.TempDir()
	if err := os.WriteFile(filepath.Join(dirA, "echo.yaml"), []byte(echoIn(map[string]*backend{"v1": {name: "a-v1", port: 7070}})), 0o644); err != nil {
		tb.Fatal(err)
	}
	writeBenchMesh(tb, dirB, services, endpoints)
	h := newHub(tb, "--log.level", "info")
	spA := newFallbackSpoke(tb, h, "a", dirA)
	spB := newFallbackSpoke(tb, h, "b", dirB)
	want := services * (1 + endpoints)
	var res fallbackRSS
	testwait.For(tb, 3*time.Minute, func() error {
		if st := spA.status(tb); !st.Remote.Complete || st.Remote.Clusters["b"] != want {
			return fmt.Errorf("spoke a's remote view: %+v, want %d objects of b", st.Remote, want)
		}
		return nil
	})
	res.Objects = want
	kb := func(key string) float64 {
		v, err := load.MemKB(spA.proc.PID(), key)
		if err != nil {
			tb.Fatal(err)
		}
		return float64(v) / 1024
	}
	res.Standby = kb("VmRSS")
	res.StandbyAnon, res.StandbyFile = statusMiB(spA.proc.PID(), "RssAnon:"), statusMiB(spA.proc.PID(), "RssFile:")
	if path := os.Getenv("NAVE_BENCH_HEAP_PROFILE"); path != "" {
		saveURL(tb, spA.url("/debug/pprof/heap?gc=1"), path)
	}

	h.proc.Kill()
	down := time.Now()
	testwait.For(tb, time.Minute, func() error {
		if !spA.status(tb).Active {
			return fmt.Errorf("spoke a not in fallback yet")
		}
		return nil
	})
	w := startRemovalWatcher(tb, "watcher.demo", addr(h.xds), addr(spA.xds))
	testwait.For(tb, 3*time.Minute, func() error {
		// A cluster and its endpoints for each of b's services.
		if _, held, servers := w.snapshot(); held < 2*services || servers[addr(spA.xds)] == 0 {
			return fmt.Errorf("the watcher holds %d resources from %v, want %d from spoke a", held, servers, 2*services)
		}
		return nil
	})
	res.Serve = time.Since(down)
	_, res.Held, _ = w.snapshot()
	res.Serving, res.Peak = kb("VmRSS"), kb("VmHWM")
	w.stop()
	spA.proc.Stop(10 * time.Second)
	spB.proc.Stop(10 * time.Second)
	return res
}

// BenchmarkFallbackSpokeRSS: a real nave-spoke's memory with the remote
// view of the load benchmark's mesh (1,000 services × 15 endpoints in the
// other cluster, -fallback.services and -fallback.endpoints after -args),
// on standby and serving it in fallback (NAVE_BENCH_HEAP_PROFILE=FILE saves
// the standby spoke's heap profile, after a collection).
func BenchmarkFallbackSpokeRSS(b *testing.B) {
	var r fallbackRSS
	for b.Loop() {
		r = runFallbackRSS(b, *fallbackServices, *fallbackEndpoints)
	}
	b.ReportMetric(r.Standby, "standby-rss-MB")
	b.ReportMetric(r.Serving, "serving-rss-MB")
	b.ReportMetric(r.Peak, "peak-rss-MB")
	b.ReportMetric(r.Serve.Seconds(), "hub-loss-to-served-s")
	b.Logf("remote view %d objects; standby %.1f MiB (anonymous %.1f, the binary's file pages %.1f), serving a proxy holding %d resources %.1f MiB (peak %.1f MiB); hub killed -> proxy served %s",
		r.Objects, r.Standby, r.StandbyAnon, r.StandbyFile, r.Held, r.Serving, r.Peak, r.Serve.Round(time.Millisecond))
}

// TestBenchmarkFallbackSpokeRSSOnce is BenchmarkFallbackSpokeRSS's twin, at
// 20 services × 3 endpoints.
func TestBenchmarkFallbackSpokeRSSOnce(t *testing.T) {
	r := runFallbackRSS(t, 20, 3)
	t.Logf("%+v", r)
	if r.Standby <= 0 || r.Serving <= 0 || r.Peak < r.Serving {
		t.Errorf("memory not measured: %+v", r)
	}
	if r.Held < 40 {
		t.Errorf("the proxy holds %d resources, want at least 40 (a cluster and its endpoints per service)", r.Held)
	}
}
