package ads_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
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
	f.set(tb, "m", synced("c1", pushctxtest.Decode(tb, bigMesh(services, "v0"))))
	ps := make([]*proxy, proxies)
	for i := range ps {
		id := fmt.Sprintf("sidecar~10.8.%d.%d~client-%d.demo~demo.svc.cluster.local", i/250, i%250+1, i)
		ps[i] = f.connect(tb, envoyNode(id, map[string]string{"app": "client"}))
		ps[i].Subscribe(typeurl.Cluster)
		ps[i].ACK(ps[i].Next(typeurl.Cluster))
	}
	config = func(i int) []*meshconfig.Object {
		return pushctxtest.Decode(tb, bigMesh(services, fmt.Sprint("v", i+1)))
	}
	return config, func(objs []*meshconfig.Object) int {
		f.set(tb, "m", synced("c1", objs))
		var wg sync.WaitGroup
		sizes := make([]int, len(ps))
		for j, p := range ps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := p.Next(typeurl.Cluster)
				for _, a := range r.GetResources() {
					sizes[j] += len(a.GetValue())
				}
				p.ACK(r)
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

// scaleMesh is S1's workload in one cluster: services in 10 namespaces,
// each with endpoints as WorkloadEntries across three localities.
func scaleMesh(services, endpoints int) string {
	var b strings.Builder
	for i := range services {
		ns := fmt.Sprint("ns-", i%10)
		fmt.Fprintf(&b, `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: svc-%[1]d, namespace: %[2]s}
spec:
  hosts: [svc-%[1]d.%[2]s.svc.cluster.local]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  workloadSelector: {labels: {app: svc-%[1]d}}
`, i, ns)
		for j := range endpoints {
			fmt.Fprintf(&b, `---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: svc-%[1]d-%[3]d, namespace: %[2]s}
spec: {address: 10.%[4]d.%[5]d.%[6]d, labels: {app: svc-%[1]d}, locality: region/zone-%[7]d}
`, i, ns, j, 1+j%3, i/250, i%250+1, j%3)
		}
	}
	return b.String()
}

// coldConnect connects proxies sidecars (over 10 namespaces) at once to a
// hub holding services × endpoints, each subscribing like Envoy (CDS and
// LDS wildcard, then EDS for every EDS cluster and RDS for every route
// name), and waits until all have ACKed everything. It returns the bytes
// one proxy received.
func coldConnect(tb testing.TB, f *fixture, proxies int) int {
	var wg sync.WaitGroup
	sizes := make([]int, proxies)
	for i := range proxies {
		ns := fmt.Sprint("ns-", i%10)
		id := fmt.Sprintf("sidecar~10.9.%d.%d~client-%d.%s~%s.svc.cluster.local", i/250, i%250+1, i, ns, ns)
		p := f.connect(tb, envoyNodeNS(id, ns, map[string]string{"app": fmt.Sprint("client-", i)}))
		wg.Add(1)
		go func() {
			defer wg.Done()
			get := func(typeURL string, names ...string) *discoveryv3.DiscoveryResponse {
				p.Subscribe(typeURL, names...)
				r := p.Next(typeURL)
				for _, a := range r.GetResources() {
					sizes[i] += len(a.GetValue())
				}
				p.ACK(r, names...)
				return r
			}
			cds := get(typeurl.Cluster)
			var eds []string
			for _, a := range cds.GetResources() {
				var c clusterv3.Cluster
				if a.UnmarshalTo(&c) == nil && c.GetType() == clusterv3.Cluster_EDS {
					eds = append(eds, c.GetName())
				}
			}
			lds := get(typeurl.Listener)
			var rds []string
			for _, a := range lds.GetResources() {
				var l listenerv3.Listener
				if a.UnmarshalTo(&l) == nil {
					rds = append(rds, rdsNames(tb, map[string]*listenerv3.Listener{l.GetName(): &l})...)
				}
			}
			get(typeurl.Endpoint, eds...)
			get(typeurl.Route, rds...)
		}()
	}
	wg.Wait()
	return sizes[0]
}

func BenchmarkColdConnect(b *testing.B) {
	for _, sz := range []struct{ services, endpoints, proxies int }{{1000, 15, 100}} {
		b.Run(fmt.Sprintf("services=%d/endpoints=%d/proxies=%d", sz.services, sz.endpoints, sz.proxies), func(b *testing.B) {
			objs := pushctxtest.Decode(b, scaleMesh(sz.services, sz.endpoints))
			b.ResetTimer()
			size := 0
			for range b.N {
				b.StopTimer()
				f := newFixtureVerify(b, nil, false)
				f.set(b, "m", synced("c1", objs))
				b.StartTimer()
				size = coldConnect(b, f, sz.proxies)
			}
			b.ReportMetric(float64(size)/1024, "kb/proxy")
		})
	}
}

// TestColdConnectBenchmarkOnce is BenchmarkColdConnect's twin, small.
func TestColdConnectBenchmarkOnce(t *testing.T) {
	f := newFixtureVerify(t, nil, true)
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, scaleMesh(20, 3))))
	if size := coldConnect(t, f, 5); size == 0 {
		t.Fatal("the proxies received nothing")
	}
}
