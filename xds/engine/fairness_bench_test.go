package engine_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/cache"
	"github.com/navemesh/nave/xds/engine"
	"github.com/navemesh/nave/xds/proxy"
	"github.com/navemesh/nave/xds/pushctx"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
)

// fairness is an engine serving two meshes to in-process "streams" that
// do what an ADS stream does with each published State: generate their
// key's resources (cache.Entry.ForProxy) and wait for the next State.
// Mesh a has proxies in namespaces many distinct keys; mesh b one proxy.
type fairness struct {
	src  *pushctxtest.Source
	eng  *engine.Engine
	aCfg []*meshconfig.Object // a's config; its WorkloadEntries move
	bCfg []*meshconfig.Object
	// bSeen receives the version of each b State b's stream generated.
	bSeen chan uint64
}

const (
	fairServices = 200 // services of mesh a, each with one WorkloadEntry
	fairSlots    = 2   // push.maxConcurrentGenerations
	fairPace     = 50  // limits.pushesPerSecond, the hub's default
)

func newFairness(tb testing.TB, aProxies int) *fairness {
	tb.Helper()
	f := &fairness{src: pushctxtest.NewSource(), bSeen: make(chan uint64, 64)}
	var y strings.Builder
	for i := range fairServices {
		fmt.Fprintf(&y, `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: svc-%d, namespace: svc}
spec:
  hosts: [svc-%d.example.com]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  workloadSelector: {labels: {app: svc-%d}}
---
%s---
`, i, i, i, workloadEntry(i, 0))
	}
	f.aCfg = pushctxtest.Decode(tb, y.String())
	f.bCfg = pushctxtest.EchoConfig(tb, 80, 20)
	f.src.Set("a", pushctxtest.Cluster("c1", true, f.aCfg))
	f.src.Set("b", pushctxtest.Cluster("c1", true, f.bCfg))
	f.eng = engine.New(f.src, engine.Options{
		Push: pushctx.Options{DebounceQuiet: 10 * time.Millisecond, DebounceMax: 100 * time.Millisecond,
			PushesPerSecond: func(string) float64 { return fairPace }},
		Cache: cache.Options{MaxConcurrentGenerations: fairSlots},
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	tb.Cleanup(func() { cancel(); wg.Wait() })
	f.eng.Start(ctx)
	stream := func(k proxy.Key, seen chan<- uint64) {
		defer wg.Done()
		for {
			st, changed := f.eng.Publisher().Current(k.Mesh)
			if st != nil {
				f.eng.Cache().Entry(st).ForProxy(k)
				if seen != nil {
					seen <- st.Version
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
		}
	}
	for i := range aProxies {
		wg.Add(1)
		go stream(proxy.Key{Type: proxy.Sidecar, Mesh: "a", Namespace: fmt.Sprintf("ns-%d", i)}, nil)
	}
	wg.Add(1)
	go stream(proxy.Key{Type: proxy.Sidecar, Mesh: "b", Namespace: "demo"}, f.bSeen)
	f.eng.Notify("a")
	f.eng.Notify("b")
	f.awaitB(tb, 1)
	return f
}

// workloadEntry is service i's WorkloadEntry at its move'th address.
func workloadEntry(i, move int) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: svc-%d, namespace: svc}
spec: {address: 10.%d.%d.%d, ports: {http: 8080}, labels: {app: svc-%d}}
`, i, move%200, i/250, i%250+1, i)
}

// awaitB returns once b's stream generated a State of version v or later.
func (f *fairness) awaitB(tb testing.TB, v uint64) {
	tb.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case got := <-f.bSeen:
			if got >= v {
				return
			}
		case <-timeout:
			tb.Fatalf("mesh b's stream did not get version %d", v)
		}
	}
}

// churnA moves a's WorkloadEntries, one per change, as fast as the
// engine takes them (each change an endpoint change, built without the
// debounce), until stop is closed.
func (f *fairness) churnA(tb testing.TB, stop <-chan struct{}) (done <-chan int) {
	out := make(chan int, 1)
	objs := slices.Clone(f.aCfg)
	go func() {
		moves := 0
		for {
			select {
			case <-stop:
				out <- moves
				return
			default:
			}
			moves++
			i := moves % fairServices
			we, errs := meshconfig.DecodeYAML([]byte(workloadEntry(i, moves)), "churn.yaml")
			if len(errs) > 0 {
				tb.Errorf("decode: %v", errs)
				out <- moves
				return
			}
			objs[2*i+1] = we[0]
			f.src.Set("a", pushctxtest.Cluster("c1", true, slices.Clone(objs)))
			f.eng.NotifyEndpoints("a")
			time.Sleep(time.Millisecond) // the churn's pace: a move per ms, more than builds keep up with
		}
	}()
	return out
}

// changeB makes one endpoint change in b, a pace's interval after the
// previous one (b's own pace never holds it), and returns how long until
// b's stream generated the State carrying it.
func (f *fairness) changeB(tb testing.TB, move int) time.Duration {
	tb.Helper()
	time.Sleep(time.Second/fairPace + 5*time.Millisecond)
	st, _ := f.eng.Publisher().Current("b")
	objs := slices.Clone(f.bCfg)
	we, errs := meshconfig.DecodeYAML([]byte(fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: echo-v1, namespace: demo}
spec: {address: 10.9.%d.%d, ports: {grpc: 17071}, labels: {app: echo, version: v1}}
`, move/250%250, move%250+1)), "b.yaml")
	if len(errs) > 0 {
		tb.Fatal(errs)
	}
	for i, o := range objs {
		if o.Kind.Kind == "WorkloadEntry" && o.Name == "echo-v1" {
			objs[i] = we[0]
		}
	}
	f.src.Set("b", pushctxtest.Cluster("c1", true, objs))
	start := time.Now()
	f.eng.NotifyEndpoints("b")
	f.awaitB(tb, st.Version+1)
	return time.Since(start)
}

// fairnessRun times n single changes of mesh b, first with mesh a quiet,
// then while a's endpoints churn; it returns both, and a's moves.
func fairnessRun(tb testing.TB, aProxies, n int, started func()) (quiet, busy []time.Duration, moves int) {
	f := newFairness(tb, aProxies)
	started()
	for i := range n {
		quiet = append(quiet, f.changeB(tb, i))
	}
	stop := make(chan struct{})
	done := f.churnA(tb, stop)
	for i := range n {
		busy = append(busy, f.changeB(tb, n+i))
	}
	close(stop)
	return quiet, busy, <-done
}

// BenchmarkFairness: mesh a (200 services, 100 proxies of distinct keys)
// has its WorkloadEntries moved as fast as the engine builds (S3-style
// churn at capacity) while mesh b (one proxy) makes single endpoint
// changes; it reports b's propagation — from the change to b's stream
// having generated the State that carries it — quiet (a idle) and busy
// (a churning), their medians and the ratio busy/quiet (target: at most
// 1.2), with push.maxConcurrentGenerations 2 shared round robin and each
// mesh's builds paced at limits.pushesPerSecond's default (decision 037).
func BenchmarkFairness(b *testing.B) {
	quiet, busy, moves := fairnessRun(b, 100, b.N, b.ResetTimer)
	b.StopTimer()
	q, bz := median(quiet), median(busy)
	b.ReportMetric(ms(q), "quiet-p50-ms")
	b.ReportMetric(ms(bz), "busy-p50-ms")
	b.ReportMetric(ms(slices.Max(busy)), "busy-max-ms")
	b.ReportMetric(float64(bz)/float64(q), "busy/quiet")
	b.ReportMetric(float64(moves), "a-moves")
}

// TestBenchmarkFairnessOnce is BenchmarkFairness's twin: one change of b
// quiet and one while a churns, by the same code (fewer proxies). The
// test asserts that both arrive; timings are the benchmark's.
func TestBenchmarkFairnessOnce(t *testing.T) {
	quiet, busy, moves := fairnessRun(t, 10, 1, func() {})
	t.Logf("b quiet %v, b while a churns %v (%d moves of a)", quiet, busy, moves)
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
