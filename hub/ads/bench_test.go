package ads_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/navemesh/nave/shared/gen"
	"github.com/navemesh/nave/shared/meshconfig"
)

// fanOut connects proxies Envoy sidecars, each holding the clusters of a
// mesh of services. config(i) returns the i-th config (every cluster's
// content differs from the previous one); push applies it and waits until
// every proxy received and ACKed its new CDS response, returning the bytes
// one proxy received. push covers the debounce (10 ms), the push context
// rebuild, generation for the proxies' shared key, and one
// state-of-the-world response per proxy.
func fanOut(tb testing.TB, services, proxies int) (config func(i int) []*meshconfig.Object, push func([]*meshconfig.Object) int) {
	f := newFixtureVerify(tb, nil, false)
	f.set(tb, "m", synced("c1", decode(tb, bigMesh(services, "v0"))))
	ps := make([]*proxy, proxies)
	for i := range ps {
		id := fmt.Sprintf("sidecar~10.8.%d.%d~client-%d.demo~demo.svc.cluster.local", i/250, i%250+1, i)
		ps[i] = f.connect(tb, envoyNode(id, map[string]string{"app": "client"}))
		ps[i].subscribe(gen.ClusterType)
		ps[i].ack(ps[i].next(gen.ClusterType))
	}
	config = func(i int) []*meshconfig.Object { return decode(tb, bigMesh(services, fmt.Sprint("v", i+1))) }
	return config, func(objs []*meshconfig.Object) int {
		f.set(tb, "m", synced("c1", objs))
		var wg sync.WaitGroup
		sizes := make([]int, len(ps))
		for j, p := range ps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := p.next(gen.ClusterType)
				for _, a := range r.GetResources() {
					sizes[j] += len(a.GetValue())
				}
				p.ack(r)
			}()
		}
		wg.Wait()
		return sizes[0]
	}
}

// BenchmarkFanOut: one config change pushed to every proxy (time per
// change, including decoding the new config and the debounce of 10 ms).
func BenchmarkFanOut(b *testing.B) {
	for _, sz := range []struct{ services, proxies int }{{100, 10}, {1000, 10}, {1000, 100}} {
		b.Run(fmt.Sprintf("services=%d/proxies=%d", sz.services, sz.proxies), func(b *testing.B) {
			config, push := fanOut(b, sz.services, sz.proxies)
			b.ResetTimer()
			size := 0
			for i := range b.N {
				b.StopTimer()
				objs := config(i)
				b.StartTimer()
				size = push(objs)
			}
			b.ReportMetric(float64(size)/1024, "kb/proxy")
		})
	}
}

// TestFanOutBenchmarkOnce is BenchmarkFanOut's twin: one step, small.
func TestFanOutBenchmarkOnce(t *testing.T) {
	config, push := fanOut(t, 20, 3)
	if size := push(config(0)); size == 0 {
		t.Fatal("the proxies received nothing")
	}
}
