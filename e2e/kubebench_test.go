package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/e2e/load"
	"github.com/navemesh/nave/internal/testwait"
)

// kubeScale is the shape of the Kubernetes spoke benchmark.
type kubeScale struct {
	services, podsPerService int
}

// populate creates services, pods and one EndpointSlice per service, with
// bounded parallelism.
func populate(t testing.TB, cs kubernetes.Interface, sc kubeScale) {
	t.Helper()
	ctx := context.Background()
	for _, n := range []string{"bench-a", "bench-b", "bench-c", "bench-d", "bench-e"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", i), Labels: map[string]string{
			"topology.kubernetes.io/region": "region-1", "topology.kubernetes.io/zone": fmt.Sprintf("zone-%d", i)}}}
		if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	work := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := createService(ctx, cs, sc, i); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range sc.services {
		work <- i
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
}

func createService(ctx context.Context, cs kubernetes.Interface, sc kubeScale, i int) error {
	ns := []string{"bench-a", "bench-b", "bench-c", "bench-d", "bench-e"}[i%5]
	name := fmt.Sprintf("svc-%d", i)
	labels := map[string]string{"app": name}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}, {Name: "grpc", Port: 7070}}}}
	if _, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return err
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"kubernetes.io/service-name": name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080))}, {Name: ptr("grpc"), Port: ptr(int32(7070))}},
	}
	for p := range sc.podsPerService {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, p), Namespace: ns,
			Labels: map[string]string{"app": name, "version": "v1"}},
			Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%d", p%3), ServiceAccountName: "default",
				Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return err
		}
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", i/250, i%250, p+1)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)},
			NodeName:   ptr(pod.Spec.NodeName),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod.Name},
		})
	}
	_, err := cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{})
	return err
}

func ptr[T any](v T) *T { return &v }

// BenchmarkKubernetesSpoke: 1,000 Services and 10,000 pods/endpoints (set
// NAVE_BENCH_SERVICES / NAVE_BENCH_PODS_PER_SERVICE to change).
func BenchmarkKubernetesSpoke(b *testing.B) {
	sc := kubeScale{services: envInt("NAVE_BENCH_SERVICES", 1000), podsPerService: envInt("NAVE_BENCH_PODS_PER_SERVICE", 10)}
	for b.Loop() {
		runKubeBench(b, sc)
	}
}

// TestKubernetesSpokeBenchmarkOnce is the benchmark's test twin, at a small scale.
func TestKubernetesSpokeBenchmarkOnce(t *testing.T) {
	runKubeBench(t, kubeScale{services: 20, podsPerService: 5})
}

func envInt(key string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(key)); err == nil && v > 0 {
		return v
	}
	return def
}

// runKubeBench measures one spoke against a populated API server: time to
// synced at the hub, peak RSS, initial uplink bytes, and the uplink
// traffic of a rolling restart of 10% of the pods.
func runKubeBench(t testing.TB, sc kubeScale) {
	kc := kubeCluster(t)
	cfg := *kc.Admin
	cfg.QPS, cfg.Burst = 2000, 4000
	cs := kubernetes.NewForConfigOrDie(&cfg)
	start := time.Now()
	populate(t, cs, sc)
	t.Logf("populated %d services, %d pods in %s", sc.services, sc.services*sc.podsPerService, time.Since(start).Round(time.Millisecond))

	h := newHub(t)
	s := &spoke{admin: harness.FreePort(t)}
	spokeStart := time.Now()
	s.proc = harness.Start(t, "spoke-bench", binary("nave-spoke"),
		"--source", "kubernetes", "--kubernetes.kubeconfig", kc.Kubeconfig(t, spokeIdentity, "system:serviceaccounts"),
		"--cluster", "bench", "--hub.address", addr(h.spokes), "--hub.plaintext", "--hub.state-dir", t.TempDir(), "--admin.listen", addr(s.admin))
	want := sc.services * (1 + sc.podsPerService)
	var syncedAfter time.Duration
	testwait.For(t, 10*time.Minute, func() error {
		var spokes []struct {
			Synced    bool           `json:"synced"`
			Resources map[string]int `json:"resources"`
		}
		if err := harness.GetJSON(h.url("/debug/spokes"), &spokes); err != nil {
			return err
		}
		if len(spokes) != 1 || !spokes[0].Synced {
			return fmt.Errorf("not synced: %+v", spokes)
		}
		if got := spokes[0].Resources["Service"] + spokes[0].Resources["Workload"]; got < want {
			return fmt.Errorf("hub holds %d services+workloads, want %d", got, want)
		}
		syncedAfter = time.Since(spokeStart)
		return nil
	})
	metrics := s.url("/metrics")
	initial, err := metric(metrics, "nave_spoke_uplink_sent_bytes_total")
	if err != nil {
		t.Fatal(err)
	}
	msgs0, _ := metric(metrics, "nave_spoke_uplink_messages_total")

	// Rolling restart of 10% of the pods: each restarted endpoint goes
	// not-ready, then ready again at a new address, slice by slice.
	restartStart := time.Now()
	restarted := rollingRestart(t, cs, sc)
	testwait.For(t, 5*time.Minute, func() error {
		var svcs map[string][]debugService
		if err := harness.GetJSON(h.url("/debug/services?mesh=default"), &svcs); err != nil {
			return err
		}
		n := 0
		for _, s := range svcs["default"] {
			for _, e := range s.Endpoints {
				if strings.HasPrefix(e.Address, "10.200.") {
					n++
				}
			}
		}
		if n < restarted {
			return fmt.Errorf("%d of %d restarted endpoints at the hub", n, restarted)
		}
		return nil
	})
	after, _ := metric(metrics, "nave_spoke_uplink_sent_bytes_total")
	msgs1, _ := metric(metrics, "nave_spoke_uplink_messages_total")
	rss := peakRSS(s.proc.PID())
	if path := os.Getenv("NAVE_BENCH_HEAP_PROFILE"); path != "" {
		saveURL(t, s.url("/debug/pprof/heap"), path)
	}
	heap, _ := metric(metrics, "go_memstats_heap_inuse_bytes")
	cpu, _ := load.CPUSeconds(s.proc.PID())
	t.Logf("spoke heap in use at the end: %.0f MiB; RSS at the end %.0f MiB (anonymous %.0f, the binary's file pages %.0f); CPU %.2f s",
		heap/(1<<20), currentRSS(s.proc.PID()), statusMiB(s.proc.PID(), "RssAnon:"), statusMiB(s.proc.PID(), "RssFile:"), cpu)
	t.Logf("kubernetes spoke, %d services / %d pods: synced at hub after %s; spoke peak RSS %.0f MiB; initial state %.1f KiB in %.0f messages; "+
		"rolling restart of %d pods (%s): %.1f KiB in %.0f messages",
		sc.services, sc.services*sc.podsPerService, syncedAfter.Round(time.Millisecond), rss, initial/1024, msgs0,
		restarted, time.Since(restartStart).Round(time.Millisecond), (after-initial)/1024, msgs1-msgs0)
	if b, ok := t.(*testing.B); ok {
		b.ReportMetric(syncedAfter.Seconds(), "s-to-synced")
		b.ReportMetric(rss, "MiB-peak-rss")
		b.ReportMetric(initial/1024, "KiB-initial")
		b.ReportMetric((after-initial)/1024, "KiB-restart")
		b.ReportMetric(cpu, "spoke-cpu-s")
	}
}

// saveURL writes what url serves to path (a profile for later analysis).
func saveURL(t testing.TB, url, path string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// rollingRestart moves 10% of each slice's endpoints to new addresses
// (10.200.x.y), one slice update per service, and returns how many.
func rollingRestart(t testing.TB, cs kubernetes.Interface, sc kubeScale) int {
	t.Helper()
	ctx := context.Background()
	per := max(1, sc.podsPerService/10)
	n := 0
	for i := range sc.services {
		ns := []string{"bench-a", "bench-b", "bench-c", "bench-d", "bench-e"}[i%5]
		name := fmt.Sprintf("svc-%d", i)
		slice, err := cs.DiscoveryV1().EndpointSlices(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for p := range per {
			slice.Endpoints[p].Addresses = []string{fmt.Sprintf("10.200.%d.%d", i%250, p+1)}
			n++
		}
		if _, err := cs.DiscoveryV1().EndpointSlices(ns).Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return n
}
