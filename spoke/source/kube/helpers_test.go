package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/navemesh/nave/internal/kubetest"
	"github.com/navemesh/nave/internal/metrictest"
	"github.com/navemesh/nave/internal/testlog"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/shared/meshconfig"
)

// waitTimeout bounds every wait for the source; generous because the
// informers back off (up to 30 s) while a server is unreachable.
const waitTimeout = 90 * time.Second

// recorder records what a source publishes.
type recorder struct {
	mu   sync.Mutex
	pubs [][]*meshconfig.Object
}

func (r *recorder) publish(objs []*meshconfig.Object) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pubs = append(r.pubs, objs)
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pubs)
}

// last returns the last publish, nil before the first.
func (r *recorder) last() []*meshconfig.Object {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pubs) == 0 {
		return nil
	}
	return r.pubs[len(r.pubs)-1]
}

func (r *recorder) first() []*meshconfig.Object {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pubs) == 0 {
		return nil
	}
	return r.pubs[0]
}

// logBuffer collects a source's logs; the test prints them if it fails.
type logBuffer = testlog.Buffer

// running is a source under test.
type running struct {
	*Source
	rec  *recorder
	logs *logBuffer
	reg  *prometheus.Registry
}

// runSource starts a source on cfg and stops it (waiting for Run to
// return) when the test ends.
func runSource(t *testing.T, cfg *rest.Config, opts Options) *running {
	t.Helper()
	r := &running{rec: &recorder{}, logs: &logBuffer{}, reg: prometheus.NewRegistry()}
	opts.Logger = slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts.Registerer = r.reg
	src, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	r.Source = src
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, r.rec.publish) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("Run did not return 30 s after its context ended")
		}
		if t.Failed() {
			t.Logf("source log:\n%s", r.logs.String())
		}
	})
	return r
}

// waitFor waits until cond holds, within waitTimeout (testwait.For).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, waitTimeout, func() error {
		if !cond() {
			return errors.New(what)
		}
		return nil
	})
}

// waitPublished waits for a publish that satisfies cond and returns it.
func (r *running) waitPublished(t *testing.T, what string, cond func([]*meshconfig.Object) bool) []*meshconfig.Object {
	t.Helper()
	var got []*meshconfig.Object
	waitFor(t, what, func() bool {
		got = r.rec.last()
		return got != nil && cond(got)
	})
	return got
}

func (r *running) kindStatus(t *testing.T, kind string) KindStatus {
	t.Helper()
	for _, ks := range r.Status() {
		if ks.Kind == kind {
			return ks
		}
	}
	t.Fatalf("no status for kind %s", kind)
	return KindStatus{}
}

// metric returns the value of a gauge or counter, with the given labels.
func (r *running) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	return metrictest.Value(t, r.reg, name, labels...)
}

// find returns the object of a kind by namespace/name, or nil.
func find(objs []*meshconfig.Object, kind, key string) *meshconfig.Object {
	for _, o := range objs {
		if o.Kind.Kind == kind && o.Key() == key {
			return o
		}
	}
	return nil
}

func has(kind, key string) func([]*meshconfig.Object) bool {
	return func(objs []*meshconfig.Object) bool { return find(objs, kind, key) != nil }
}

func hasNot(kind, key string) func([]*meshconfig.Object) bool {
	return func(objs []*meshconfig.Object) bool { return find(objs, kind, key) == nil }
}

func all(conds ...func([]*meshconfig.Object) bool) func([]*meshconfig.Object) bool {
	return func(objs []*meshconfig.Object) bool {
		for _, c := range conds {
			if !c(objs) {
				return false
			}
		}
		return true
	}
}

// keysOf lists "Kind namespace/name" of objects, for failure messages.
func keysOf(objs []*meshconfig.Object) string {
	var b strings.Builder
	for _, o := range objs {
		fmt.Fprintf(&b, "\n  %s %s", o.Kind.Kind, o.Key())
	}
	return b.String()
}

// repoFile reads a file relative to the module root.
func repoFile(t *testing.T, rel string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", rel))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// client is a typed client on the test cluster, as the admin.
type client struct {
	kubernetes.Interface
	istio istioclient.Interface
	t     *testing.T
}

func newClient(t *testing.T, c *kubetest.Cluster) *client {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.Admin)
	if err != nil {
		t.Fatal(err)
	}
	ic, err := istioclient.NewForConfig(c.Admin)
	if err != nil {
		t.Fatal(err)
	}
	return &client{Interface: cs, istio: ic, t: t}
}

func (c *client) namespace(name string, labels map[string]string) {
	c.t.Helper()
	_, err := c.CoreV1().Namespaces().Create(c.t.Context(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
	}, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
}

func (c *client) node(name string, labels map[string]string) {
	c.t.Helper()
	_, err := c.CoreV1().Nodes().Create(c.t.Context(), &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
	}, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
}

func (c *client) service(svc *corev1.Service) {
	c.t.Helper()
	if _, err := c.CoreV1().Services(svc.Namespace).Create(c.t.Context(), svc, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// pod creates a running pod on node with ip, Ready as told (no kubelet
// runs, so the test writes the status).
func (c *client) pod(ns, name, node, ip string, ready bool, labels map[string]string) *corev1.Pod {
	c.t.Helper()
	ctx := c.t.Context()
	p, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{
			ServiceAccountName: name + "-sa",
			NodeName:           node,
			Containers:         []corev1.Container{{Name: "app", Image: "example.com/app:1"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status = corev1.PodStatus{
		Phase:      corev1.PodRunning,
		PodIP:      ip,
		PodIPs:     []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}},
	}
	p, err = c.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	return p
}

// sliceEndpoint describes one EndpointSlice endpoint.
type sliceEndpoint struct {
	ip, pod, node string
	ready         bool
	terminating   bool
}

func sliceOf(ns, name, svc string, ports map[string]int32, eps ...sliceEndpoint) *discoveryv1.EndpointSlice {
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for n, p := range ports {
		sl.Ports = append(sl.Ports, discoveryv1.EndpointPort{Name: ptr(n), Port: ptr(p), Protocol: ptr(corev1.ProtocolTCP)})
	}
	for _, e := range eps {
		ep := discoveryv1.Endpoint{
			Addresses: []string{e.ip},
			Conditions: discoveryv1.EndpointConditions{
				Ready:       ptr(e.ready && !e.terminating),
				Serving:     ptr(e.ready),
				Terminating: ptr(e.terminating),
			},
		}
		if e.pod != "" {
			ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: e.pod}
		}
		if e.node != "" {
			ep.NodeName = ptr(e.node)
		}
		sl.Endpoints = append(sl.Endpoints, ep)
	}
	return sl
}

func (c *client) createSlice(sl *discoveryv1.EndpointSlice) {
	c.t.Helper()
	if _, err := c.DiscoveryV1().EndpointSlices(sl.Namespace).Create(c.t.Context(), sl, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// updateSlice replaces a slice's endpoints and ports with sl's.
func (c *client) updateSlice(sl *discoveryv1.EndpointSlice) {
	c.t.Helper()
	if err := c.replaceSlice(sl); err != nil {
		c.t.Fatal(err)
	}
}

// replaceSlice is updateSlice for any goroutine: it returns its error.
func (c *client) replaceSlice(sl *discoveryv1.EndpointSlice) error {
	ctx := c.t.Context()
	cur, err := c.DiscoveryV1().EndpointSlices(sl.Namespace).Get(ctx, sl.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	cur.Endpoints, cur.Ports = sl.Endpoints, sl.Ports
	_, err = c.DiscoveryV1().EndpointSlices(sl.Namespace).Update(ctx, cur, metav1.UpdateOptions{})
	return err
}

// relabelPod sets one label of a pod; safe from any goroutine.
func (c *client) relabelPod(ns, name, key, value string) error {
	ctx := c.t.Context()
	p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	p.Labels[key] = value
	_, err = c.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{})
	return err
}
