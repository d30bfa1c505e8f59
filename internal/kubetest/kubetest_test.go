package kubetest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/navemesh/nave/internal/testwait"
)

var virtualServices = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "virtualservices"}

func TestClusterLifecycle(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	began := time.Now()
	first := Start(t, Options{})
	t.Logf("first cluster ready in %v", time.Since(began).Round(time.Millisecond))

	admin := clientset(t, first.Admin)
	version, err := admin.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if version.GitVersion != KubeVersion {
		t.Errorf("server version %q, want %q", version.GitVersion, KubeVersion)
	}
	createNamespace(t, admin, "first")

	// The admin kubeconfig reaches the same server.
	fromFile := clientset(t, loadKubeconfig(t, first.Kubeconfig(t, "")))
	if _, err := fromFile.CoreV1().Namespaces().Get(ctx, "first", metav1.GetOptions{}); err != nil {
		t.Fatalf("namespace through the admin kubeconfig: %v", err)
	}

	began = time.Now()
	first.Stop()
	t.Logf("first cluster stopped in %v", time.Since(began).Round(time.Millisecond))
	first.Stop() // idempotent
	if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(first.Port)); err != nil {
		t.Fatalf("port %d still taken after Stop: %v", first.Port, err)
	} else {
		l.Close()
	}
	if _, err := admin.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatal("stopped cluster still answers")
	}

	began = time.Now()
	second := Start(t, Options{Port: first.Port})
	t.Logf("second cluster ready in %v", time.Since(began).Round(time.Millisecond))
	if second.URL != first.URL {
		t.Errorf("second cluster at %s, want %s", second.URL, first.URL)
	}
	again := clientset(t, second.Admin)
	_, err = again.CoreV1().Namespaces().Get(ctx, "first", metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("namespace of the first cluster in the second: err = %v, want NotFound (fresh etcd)", err)
	}
	createNamespace(t, again, "second")
}

func TestClusterRBAC(t *testing.T) {
	t.Parallel()
	c := Start(t, Options{})

	t.Run("impersonated user", func(t *testing.T) {
		ctx := t.Context()
		createNamespace(t, clientset(t, c.Admin), "team")
		alice := clientset(t, c.As("alice", "developers"))
		if _, err := alice.CoreV1().Pods("team").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("alice lists pods without a role: err = %v, want Forbidden", err)
		}
		c.Apply(t, []byte(`
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: pod-reader, namespace: team}
rules:
- {apiGroups: [""], resources: [pods], verbs: [list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: developers-read-pods, namespace: team}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-reader}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: developers}
`))
		// The authorizer learns of new bindings through a watch (seen
		// failing once right after the apply).
		testwait.For(t, 10*time.Second, func() error {
			if _, err := alice.CoreV1().Pods("team").List(ctx, metav1.ListOptions{}); err != nil {
				return fmt.Errorf("alice lists pods with a role: %w", err)
			}
			return nil
		})
		if _, err := alice.CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("alice lists pods outside the role's namespace: err = %v, want Forbidden", err)
		}
		fromFile := clientset(t, loadKubeconfig(t, c.Kubeconfig(t, "alice", "developers")))
		if _, err := fromFile.CoreV1().Pods("team").List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("alice's kubeconfig lists pods: %v", err)
		}
		if _, err := fromFile.CoreV1().Secrets("team").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("alice's kubeconfig lists secrets: err = %v, want Forbidden", err)
		}
	})

	t.Run("apply updates", func(t *testing.T) {
		ctx := t.Context()
		cm := func(v string) []byte {
			return fmt.Appendf(nil, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {key: %q}\n", v)
		}
		c.Apply(t, cm("one"))
		c.Apply(t, cm("two"))
		got, err := clientset(t, c.Admin).CoreV1().ConfigMaps("default").Get(ctx, "settings", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Data["key"] != "two" {
			t.Errorf("configmap after two applies holds %q, want %q", got.Data["key"], "two")
		}
	})

	t.Run("spoke manifests", func(t *testing.T) {
		ctx := t.Context()
		c.Apply(t, readDeploy(t, "namespace.yaml"), readDeploy(t, "istio-crds.yaml"), readDeploy(t, "rbac.yaml"),
			[]byte(`
apiVersion: v1
kind: Namespace
metadata: {name: mesh}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: mesh}
spec:
  hosts: [reviews]
  http:
  - route:
    - destination: {host: reviews}
`))
		spokeCfg := c.As("system:serviceaccount:nave-system:nave-spoke")
		spoke := clientset(t, spokeCfg)
		if _, err := spoke.CoreV1().Services("").List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("spoke lists services: %v", err)
		}
		if _, err := spoke.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("spoke lists endpointslices: %v", err)
		}
		dyn, err := dynamic.NewForConfig(spokeCfg)
		if err != nil {
			t.Fatal(err)
		}
		vs, err := dyn.Resource(virtualServices).Namespace("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("spoke lists virtualservices: %v", err)
		}
		if len(vs.Items) != 1 || vs.Items[0].GetName() != "reviews" {
			t.Errorf("spoke sees %d virtualservices, want the one applied", len(vs.Items))
		}
		if _, err := spoke.CoreV1().Secrets("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("spoke lists secrets: err = %v, want Forbidden", err)
		}
		if _, err := spoke.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("spoke lists configmaps: err = %v, want Forbidden", err)
		}
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "nope", Namespace: "mesh"},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
		}
		if _, err := spoke.CoreV1().Services("mesh").Create(ctx, svc, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("spoke creates a service: err = %v, want Forbidden", err)
		}
	})
}

func TestAssetsMissing(t *testing.T) {
	t.Setenv(AssetsEnv, t.TempDir())
	r := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Assets(r)
	}()
	<-done
	if !strings.Contains(r.msg, "kube-apiserver not built: run make kube-assets") {
		t.Errorf("Assets on an empty folder failed with %q, want the make kube-assets hint", r.msg)
	}
}

// fatalRecorder records the message of Fatalf and ends the calling goroutine, as testing.T does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func clientset(t *testing.T, cfg *rest.Config) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func loadKubeconfig(t *testing.T, path string) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("loading %s: %v", path, err)
	}
	return cfg
}

func createNamespace(t *testing.T, cs *kubernetes.Clientset, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
}

func readDeploy(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(moduleRoot(t), "deploy", "spoke", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// A start whose process fails on a port in use is retried (the port was
// taken between finding it free and binding it); any other failure, or a
// third clash, is returned.
func TestRetryPortClash(t *testing.T) {
	dir := t.TempDir()
	run := func(fail []bool) (int, error) {
		starts := 0
		var p *process
		err := retryPortClash(t, func() error {
			script := "sleep 0.05"
			if fail[starts] {
				script = "echo 'listen tcp 127.0.0.1:1: bind: address already in use' >&2; exit 1"
			}
			starts++
			var err error
			p, err = startProcess("fake", "/bin/sh", filepath.Join(dir, fmt.Sprintf("fake-%d.log", time.Now().UnixNano())), "-c", script)
			if err != nil {
				return err
			}
			<-p.done
			if p.err != nil {
				return fmt.Errorf("fake exited: %v", p.err)
			}
			return nil
		}, func() *process { return p })
		return starts, err
	}
	if n, err := run([]bool{true, true, false}); err != nil || n != 3 {
		t.Errorf("two clashes, then a start: %d starts, %v; want 3, nil", n, err)
	}
	if n, err := run([]bool{true, true, true}); err == nil || n != portClashAttempts {
		t.Errorf("clashing every time: %d starts, %v; want %d and the error", n, err, portClashAttempts)
	}
	other := func() (int, error) {
		starts := 0
		var p *process
		err := retryPortClash(t, func() error {
			starts++
			p, _ = startProcess("fake", "/bin/sh", filepath.Join(dir, "other.log"), "-c", "echo 'bad flag' >&2; exit 2")
			<-p.done
			return fmt.Errorf("fake exited: %v", p.err)
		}, func() *process { return p })
		return starts, err
	}
	if n, err := other(); err == nil || n != 1 {
		t.Errorf("another failure: %d starts, %v; want 1 and the error", n, err)
	}
}
