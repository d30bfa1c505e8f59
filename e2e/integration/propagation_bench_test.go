package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/internal/kubetest"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/debounce"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/spoke/source/files"
	"github.com/navemesh/nave/spoke/source/kube"
	"github.com/navemesh/nave/spoke/uplink"
	"github.com/navemesh/nave/xds/ads"
	"github.com/navemesh/nave/xds/ads/adstest"
	"github.com/navemesh/nave/xds/cache"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/pushctx"
)

// propQuiet is every debounce's quiet period on the way, the product's
// defaults: the spoke's source (files.debounce, kubernetes.debounce) and
// the hub's push context (push.debounceQuiet).
const propQuiet = 100 * time.Millisecond

// propagation is a spoke's source and uplink, a hub's ingest, push
// context, cache and ADS server, and a proxyless client watching
// listeners by name, all in process over loopback gRPC, each debounce on
// the one edge.
type propagation struct {
	edge   debounce.Edge
	in     *hubIngest
	pc     *pushctx.Publisher
	c      *cache.Cache
	up     *uplink.Uplink
	client *adstest.Proxy
	names  map[string][]string // what the client watches, by type URL
}

func newPropagation(tb testing.TB, edge debounce.Edge) *propagation {
	tb.Helper()
	p := &propagation{edge: edge, names: map[string][]string{}}
	p.in = newHubIngest(ingest.StoreOptions{StaleGracePeriod: time.Hour,
		OnChange: func(m string, endpointsOnly bool) {
			if endpointsOnly {
				p.pc.NotifyEndpoints(m)
			} else {
				p.pc.Notify(m)
			}
		}}, ingest.ServerOptions{})
	p.pc = pushctx.New(p.in, pushctx.Options{DebounceQuiet: propQuiet, DebounceMax: time.Second, DebounceEdge: edge,
		Ready: p.in.Ready, OnPublish: func(st *pushctx.State) { p.c.Entry(st) }})
	p.c = cache.New(p.pc, cache.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	p.pc.Start(ctx)
	hubAddr := serveGRPC(tb, func(s *grpc.Server) { protocolv1.RegisterSyncServer(s, p.in.srv) })
	srv := ads.New(p.c, ads.Options{DefaultMesh: "m", Registerer: prometheus.NewRegistry()})
	adsAddr := serveGRPC(tb, func(s *grpc.Server) { discoveryv3.RegisterAggregatedDiscoveryServiceServer(s, srv) })

	p.up = uplink.New(uplink.Options{Address: hubAddr, Mesh: "m", Cluster: "c1",
		BackoffInitial: time.Millisecond, BackoffMax: 10 * time.Millisecond, MaxMessageBytes: 16 << 20})
	p.run(tb, p.up.Run)
	p.client = adstest.Connect(tb, dialInsecure(tb, adsAddr), node("grpc-client", "m"))
	return p
}

// run runs f until the benchmark or test ends.
func (p *propagation) run(tb testing.TB, f func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("run: %v", err)
		}
	})
}

// subscribe subscribes the client to names of typeURL.
func (p *propagation) subscribe(typeURL string, names ...string) {
	p.names[typeURL] = names
	p.client.Subscribe(typeURL, names...)
}

// await returns once the client received a response seen says yes to,
// ACKing every response.
func (p *propagation) await(tb testing.TB, what string, seen func(*discoveryv3.DiscoveryResponse) bool) {
	tb.Helper()
	timeout := time.After(10 * time.Second)
	for {
		var r *discoveryv3.DiscoveryResponse
		select {
		case r = <-p.client.Responses:
		case <-timeout:
			tb.Fatalf("the client did not receive %s", what)
		}
		p.client.ACK(r, p.names[r.GetTypeUrl()]...)
		if seen(r) {
			return
		}
	}
}

// awaitListener returns once the client received the listener name.
func (p *propagation) awaitListener(tb testing.TB, name string) {
	tb.Helper()
	p.await(tb, "listener "+name, func(r *discoveryv3.DiscoveryResponse) bool {
		return r.GetTypeUrl() == typeurl.Listener && slices.Contains(adstest.Names(tb, r), name)
	})
}

// awaitEndpoints returns once the client received an endpoint of cluster.
func (p *propagation) awaitEndpoints(tb testing.TB, cluster string) {
	tb.Helper()
	p.await(tb, "endpoints of "+cluster, func(r *discoveryv3.DiscoveryResponse) bool {
		if r.GetTypeUrl() != typeurl.Endpoint {
			return false
		}
		for _, a := range r.GetResources() {
			var cla endpointv3.ClusterLoadAssignment
			if err := a.UnmarshalTo(&cla); err != nil {
				tb.Fatal(err)
			}
			for _, l := range cla.GetEndpoints() {
				if cla.GetClusterName() == cluster && len(l.GetLbEndpoints()) > 0 {
					return true
				}
			}
		}
		return false
	})
}

// quiet lets the quiet period pass at the spoke and the hub: the next
// change is a single change after a quiet period, the case measured. (A
// leading debounce that acted holds what follows within its quiet
// period; the second action of a change made of several events ends
// within it too.)
func quiet() { time.Sleep(3 * propQuiet) }

// serviceEntryYAML is a ServiceEntry for host:80.
func serviceEntryYAML(name, host string) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: %s, namespace: ns}
spec:
  hosts: [%s]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.1}]
`, name, host)
}

// filesPropagation runs n single changes through the files source: each
// writes a new file holding a new ServiceEntry; it returns how long after
// each write returned the client saw the ServiceEntry's listener.
func filesPropagation(tb testing.TB, edge debounce.Edge, n int, started func()) []time.Duration {
	p := newPropagation(tb, edge)
	dir := tb.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "base.yaml"), []byte(serviceEntryYAML("base", "base.example.com")), 0o644); err != nil {
		tb.Fatal(err)
	}
	src, err := files.New(dir, files.Options{Debounce: propQuiet, DebounceEdge: edge}, nil, nil)
	if err != nil {
		tb.Fatal(err)
	}
	p.run(tb, func(ctx context.Context) error { return src.Run(ctx, p.up.Update) })
	listeners := make([]string, n)
	for i := range n {
		listeners[i] = fmt.Sprintf("svc-%d.example.com:80", i)
	}
	p.subscribe(typeurl.Listener, append([]string{"base.example.com:80"}, listeners...)...)
	p.awaitListener(tb, "base.example.com:80")
	started()
	took := make([]time.Duration, n)
	for i := range n {
		quiet()
		path, body := filepath.Join(dir, fmt.Sprintf("svc-%d.yaml", i)), serviceEntryYAML(fmt.Sprintf("svc-%d", i), fmt.Sprintf("svc-%d.example.com", i))
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			tb.Fatal(err)
		}
		start := time.Now()
		p.awaitListener(tb, listeners[i])
		took[i] = time.Since(start)
	}
	return took
}

// kubePropagation runs n single changes through the kubernetes source
// against a real kube-apiserver. Each creates a Service, and returns how
// long after its create returned the client saw the Service's listener;
// or, with ready, creates the Service first (untimed, seen by the client,
// then a quiet period) and then its first EndpointSlice, and returns how
// long after that create returned the client saw the endpoint.
func kubePropagation(tb testing.TB, kc *kubetest.Cluster, edge debounce.Edge, ready bool, n int, started func()) []time.Duration {
	p := newPropagation(tb, edge)
	cs, err := kubernetes.NewForConfig(kc.Admin)
	if err != nil {
		tb.Fatal(err)
	}
	ns := fmt.Sprintf("prop-%s-%d", edge, time.Now().UnixNano())
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	createService := func(name string) {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}, Selector: map[string]string{"app": name}}}
		if _, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			tb.Fatal(err)
		}
	}
	createEndpoints := func(i int, name string) {
		port, ready := int32(8080), true
		sl := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name + "-1", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{fmt.Sprintf("10.1.%d.%d", i/250, i%250+1)},
				Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
			Ports: []discoveryv1.EndpointPort{{Name: ptr("http"), Port: &port}},
		}
		if _, err := cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, sl, metav1.CreateOptions{}); err != nil {
			tb.Fatal(err)
		}
	}
	createService("base")
	src, err := kube.New(kc.Admin, kube.Options{Debounce: propQuiet, DebounceEdge: edge, NamespaceSelector: "kubernetes.io/metadata.name=" + ns})
	if err != nil {
		tb.Fatal(err)
	}
	p.run(tb, func(ctx context.Context) error { return src.Run(ctx, p.up.Update) })
	host := func(name string) string { return fmt.Sprintf("%s.%s.svc.cluster.local", name, ns) }
	names, listeners, clusters := make([]string, n), make([]string, n), make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("svc-%d", i)
		listeners[i], clusters[i] = host(names[i])+":80", build.ClusterName(host(names[i]), 80, "")
	}
	p.subscribe(typeurl.Listener, append([]string{host("base") + ":80"}, listeners...)...)
	if ready {
		p.subscribe(typeurl.Endpoint, clusters...)
	}
	p.awaitListener(tb, host("base")+":80")
	started()
	took := make([]time.Duration, n)
	for i := range n {
		if ready {
			createService(names[i])
			p.awaitListener(tb, listeners[i])
		}
		quiet()
		if !ready {
			createService(names[i])
			start := time.Now()
			p.awaitListener(tb, listeners[i])
			took[i] = time.Since(start)
			continue
		}
		createEndpoints(i, names[i])
		start := time.Now()
		p.awaitEndpoints(tb, clusters[i])
		took[i] = time.Since(start)
	}
	return took
}

func ptr[T any](v T) *T { return &v }

// BenchmarkPropagation times a single change after a quiet period from
// the write of a file (files source) or the return of a Service's create
// (kubernetes source, a real kube-apiserver) to a proxyless client
// receiving its listener — or, "ready", from the create of a Service's
// first EndpointSlice to the client receiving that endpoint — through a spoke's source and uplink and a hub's
// ingest, push context, cache and ADS server in process, every debounce
// on the leading or the trailing edge (docs/load-benchmark.md,
// Propagation). It reports the median (p50-ms) and the slowest (max-ms)
// change; the quiet period before each change is outside the timer.
func BenchmarkPropagation(b *testing.B) {
	parent := b
	var kc *kubetest.Cluster
	for _, source := range []string{"files", "kubernetes", "kubernetes-ready"} {
		for _, edge := range []debounce.Edge{debounce.Trailing, debounce.Leading} {
			b.Run(source+"/"+string(edge), func(b *testing.B) {
				var took []time.Duration
				if source == "files" {
					took = filesPropagation(b, edge, b.N, b.ResetTimer)
				} else {
					if kc == nil { // one API server for every round: it stops with the parent
						kc = kubetest.Start(parent, kubetest.Options{})
					}
					took = kubePropagation(b, kc, edge, source == "kubernetes-ready", b.N, b.ResetTimer)
				}
				b.StopTimer()
				report(b, took)
			})
		}
	}
}

func report(b *testing.B, took []time.Duration) {
	sorted := slices.Clone(took)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(sorted[len(sorted)/2]), "p50-ms")
	b.ReportMetric(ms(sorted[len(sorted)-1]), "max-ms")
}

// TestBenchmarkPropagationOnce is BenchmarkPropagation's twin: one change
// through each source on each edge, by the same code. Timings are the
// benchmark's; the test asserts that every change arrives.
func TestBenchmarkPropagationOnce(t *testing.T) {
	for _, edge := range []debounce.Edge{debounce.Trailing, debounce.Leading} {
		t.Run("files/"+string(edge), func(t *testing.T) {
			took := filesPropagation(t, edge, 1, func() {})
			t.Logf("files, %s edge: %v", edge, took)
		})
	}
	kc := kubetest.Start(t, kubetest.Options{})
	for _, edge := range []debounce.Edge{debounce.Trailing, debounce.Leading} {
		t.Run("kubernetes/"+string(edge), func(t *testing.T) {
			took := kubePropagation(t, kc, edge, false, 1, func() {})
			t.Logf("kubernetes, %s edge: %v", edge, took)
		})
		t.Run("kubernetes-ready/"+string(edge), func(t *testing.T) {
			took := kubePropagation(t, kc, edge, true, 1, func() {})
			t.Logf("kubernetes, service ready, %s edge: %v", edge, took)
		})
	}
}
