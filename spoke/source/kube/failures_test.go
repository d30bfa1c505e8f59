package kube

import (
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/navemesh/nave/internal/kubetest"
)

const (
	ordersVS = `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: orders
  namespace: shop
spec:
  hosts: [orders.shop.svc.cluster.local]
  http:
  - route:
    - destination: {host: orders.shop.svc.cluster.local}
`
	// limitedRBAC is the spoke's role without virtualservices (and
	// granted, with them, by allowVirtualServices).
	limitedRBAC = `
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: limited
rules:
- apiGroups: [""]
  resources: [services, pods, namespaces, nodes]
  verbs: [get, list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
- apiGroups: [networking.istio.io]
  resources: [destinationrules, gateways, serviceentries, workloadentries, workloadgroups, sidecars, envoyfilters]
  verbs: [get, list, watch]
- apiGroups: [security.istio.io]
  resources: [peerauthentications, requestauthentications, authorizationpolicies]
  verbs: [get, list, watch]
- apiGroups: [telemetry.istio.io]
  resources: [telemetries]
  verbs: [get, list, watch]
- apiGroups: [extensions.istio.io]
  resources: [wasmplugins]
  verbs: [get, list, watch]
- apiGroups: [networking.istio.io]
  resources: [proxyconfigs]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: limited
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: limited}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: limited}
`
	allowVirtualServices = `
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: limited-virtualservices
rules:
- apiGroups: [networking.istio.io]
  resources: [virtualservices]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: limited-virtualservices
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: limited-virtualservices}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: limited}
`
)

// TestKubeSourceFailures covers what the source does when the cluster
// is not as it should be: Istio CRDs missing, the API server
// unreachable, a kind forbidden.
func TestKubeSourceFailures(t *testing.T) {
	c := kubetest.Start(t, kubetest.Options{})
	k := newClient(t, c)
	k.namespace("shop", nil)
	k.service(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	})

	// This one runs first: the CRDs are installed halfway through it.
	t.Run("Istio CRDs missing, then installed", func(t *testing.T) {
		src := runSource(t, c.Admin, Options{CRDPoll: 300 * time.Millisecond})
		objs := src.waitPublished(t, "the initial publish without Istio kinds", has("Service", "shop/orders"))
		if err := src.Ready(); err != nil {
			t.Errorf("Ready without Istio CRDs: %v", err)
		}
		for _, o := range objs {
			if !o.Kind.Registry {
				t.Errorf("%s %s published without its CRD", o.Kind, o.Key())
			}
		}
		vs := src.kindStatus(t, "VirtualService")
		if vs.State != StateNotInstalled || vs.Synced {
			t.Errorf("VirtualService status %+v, want %q", vs, StateNotInstalled)
		}
		istioKinds := 0
		for _, d := range kindDefs {
			if d.crd {
				istioKinds++
			}
		}
		if got := src.metric(t, "nave_spoke_kube_kinds_not_synced"); got != float64(istioKinds) || istioKinds != 24 {
			t.Errorf("kinds_not_synced = %v, want the %d CRD kinds (24: Istio's networking, security, Telemetry, EnvoyFilter, WasmPlugin and ProxyConfig (watched to be refused), and 10 Gateway API kinds)", got, istioKinds)
		}
		logs := src.logs.String()
		if !strings.Contains(logs, "CRD kinds not installed") || !strings.Contains(logs, "VirtualService, DestinationRule") {
			t.Errorf("no warning naming the missing kinds in the log")
		}

		c.Apply(t, repoFile(t, "deploy/spoke/istio-crds.yaml"))
		c.Apply(t, []byte(ordersVS))
		src.waitPublished(t, "the VirtualService once its CRD is installed",
			all(has("VirtualService", "shop/orders"), has("Service", "shop/orders")))
		waitFor(t, "every kind synced but the Gateway API's (not installed here)", func() bool {
			for _, ks := range src.Status() {
				if !ks.Synced && !strings.HasSuffix(ks.Resource, ".gateway.networking.k8s.io") {
					return false
				}
			}
			return true
		})
	})

	t.Run("API server unreachable at start", func(t *testing.T) {
		addr := reservePort(t)
		cfg := rest.CopyConfig(c.Admin)
		cfg.Host = "https://" + addr
		src := runSource(t, cfg, Options{})
		waitFor(t, "Ready to report the unreachable server", func() bool {
			err := src.Ready()
			return err != nil && strings.Contains(err.Error(), "connection refused") && strings.Contains(err.Error(), "Service")
		})
		t.Logf("Ready while unreachable: %v", src.Ready())
		// The server stays away for a while: discovery and the informers
		// retry, backing off, and publish nothing.
		time.Sleep(2 * time.Second)
		// client-go retries a refused connection inside the informer: the
		// reason shows at discovery, the kinds show as still syncing.
		if st := src.kindStatus(t, "Service"); st.Synced || st.State != StateSyncing {
			t.Errorf("Service status while unreachable: %+v", st)
		}
		if n := src.rec.count(); n != 0 {
			t.Fatalf("%d publishes before the server was reachable", n)
		}

		startProxy(t, addr, c.URL[len("https://"):])
		began := time.Now()
		objs := src.waitPublished(t, "the initial publish once the server is reachable", has("Service", "shop/orders"))
		t.Logf("published %v after the server became reachable", time.Since(began).Round(time.Millisecond))
		if err := src.Ready(); err != nil {
			t.Errorf("Ready after the initial publish: %v", err)
		}
		if first := src.rec.first(); len(first) != len(objs) {
			t.Errorf("first publish has %d objects, the settled state %d: it was not complete", len(first), len(objs))
		}
	})

	t.Run("a forbidden kind does not block the others", func(t *testing.T) {
		c.Apply(t, []byte(limitedRBAC))
		src := runSource(t, c.As("limited"), Options{})
		objs := src.waitPublished(t, "the initial publish without VirtualServices", has("Service", "shop/orders"))
		if find(objs, "VirtualService", "shop/orders") != nil {
			t.Errorf("a forbidden VirtualService was published")
		}
		if err := src.Ready(); err != nil {
			t.Errorf("Ready with a forbidden kind: %v", err)
		}
		st := src.kindStatus(t, "VirtualService")
		const want = "forbidden: cannot list virtualservices.networking.istio.io: grant get/list/watch"
		if st.State != StateForbidden || st.LastError != want {
			t.Errorf("VirtualService status %+v, want state %q and error %q", st, StateForbidden, want)
		}
		// The Gateway API's CRDs are not installed in this cluster.
		notInstalled := 0
		for _, ks := range src.Status() {
			if strings.HasSuffix(ks.Resource, ".gateway.networking.k8s.io") && ks.State == StateNotInstalled {
				notInstalled++
				continue
			}
			if ks.Kind != "VirtualService" && !ks.Synced {
				t.Errorf("kind %s not synced: %+v", ks.Kind, ks)
			}
		}
		if !strings.Contains(src.logs.String(), want) {
			t.Errorf("the log does not say %q", want)
		}
		if got := src.metric(t, "nave_spoke_kube_kinds_not_synced"); got != float64(1+notInstalled) {
			t.Errorf("kinds_not_synced = %v, want 1 (and the %d Gateway API kinds not installed)", got, notInstalled)
		}

		// Granted later, the kind syncs and its objects join.
		c.Apply(t, []byte(allowVirtualServices))
		began := time.Now()
		src.waitPublished(t, "the VirtualService once allowed", has("VirtualService", "shop/orders"))
		t.Logf("VirtualService joined %v after the grant", time.Since(began).Round(time.Millisecond))
		if st := src.kindStatus(t, "VirtualService"); !st.Synced || st.LastError != "" {
			t.Errorf("VirtualService status after the grant: %+v", st)
		}
	})
}

// reservePort returns a loopback address that nothing listens on.
func reservePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// startProxy forwards TCP connections on addr to target until the test
// ends. The API server's certificate names 127.0.0.1, so TLS passes
// through.
func startProxy(t *testing.T, addr, target string) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("proxy on %s: %v", addr, err)
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		closed bool
		conns  []net.Conn
	)
	// track keeps a connection for the cleanup to close; after the
	// cleanup, it closes it at once.
	track := func(cs ...net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			for _, c := range cs {
				c.Close()
			}
			return false
		}
		conns = append(conns, cs...)
		return true
	}
	wg.Go(func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			if !track(in, out) {
				return
			}
			wg.Go(func() { pipe(out, in) })
			wg.Go(func() { pipe(in, out) })
		}
	})
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		closed = true
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

func pipe(dst, src net.Conn) {
	_, err := io.Copy(dst, src)
	if err != nil && !errors.Is(err, net.ErrClosed) {
		dst.Close()
		return
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}
