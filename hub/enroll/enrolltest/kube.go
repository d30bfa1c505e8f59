package enrolltest

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/hub/enroll"
	"github.com/navemesh/nave/internal/kubetest"
)

// The identity deploy/hub/rbac.yaml grants, and the namespace it grants
// it in.
const (
	HubNamespace = "nave-system"
	HubUser      = "system:serviceaccount:nave-system:nave-hub"
)

// HubGroups are the groups of HubUser.
var HubGroups = []string{"system:serviceaccounts", "system:serviceaccounts:nave-system"}

// Kube is a real kube-apiserver (internal/kubetest) with deploy/hub's
// namespace and RBAC applied and in effect. Its fields are set once by
// StartKube; its methods may be called from any goroutine.
type Kube struct {
	*kubetest.Cluster
	// AdminSecrets reads and writes Secrets as the API server's admin.
	AdminSecrets ca.SecretClient
}

// StartKube starts an API server, applies deploy/hub/namespace.yaml and
// rbac.yaml, and waits until the API server's RBAC authorizer lets
// HubUser read Secrets in HubNamespace (it learns new bindings from a
// watch). It stops when the test ends.
func StartKube(t testing.TB) *Kube {
	t.Helper()
	c := kubetest.Start(t, kubetest.Options{})
	_, self, _, _ := runtime.Caller(0)
	deploy := filepath.Join(filepath.Dir(self), "..", "..", "..", "deploy", "hub")
	for _, f := range []string{"namespace.yaml", "rbac.yaml"} {
		b, err := os.ReadFile(filepath.Join(deploy, f))
		if err != nil {
			t.Fatal(err)
		}
		c.Apply(t, b)
	}
	k := &Kube{Cluster: c}
	k.AdminSecrets = k.Client(t, "")
	hub := k.HubClient(t)
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := hub.Get(context.Background(), HubNamespace, "nave-rbac-probe")
		if apierrors.IsNotFound(err) {
			return k
		}
		if time.Now().After(deadline) {
			t.Fatalf("deploy/hub's RBAC did not take effect: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Client is a SecretClient acting as user in groups (the admin if user is
// ""); every call makes a new one, as separate processes have.
func (k *Kube) Client(t testing.TB, user string, groups ...string) ca.SecretClient {
	t.Helper()
	cfg := k.Admin
	if user != "" {
		cfg = k.As(user, groups...)
	}
	c, err := ca.NewSecretClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// HubClient is a new SecretClient acting as the hub.
func (k *Kube) HubClient(t testing.TB) ca.SecretClient {
	return k.Client(t, HubUser, HubGroups...)
}

// HubStore is a new enrollment SecretStore in HubNamespace acting as the
// hub: another replica, or the same one restarted.
func (k *Kube) HubStore(t testing.TB, opts ...enroll.Option) *enroll.SecretStore {
	return enroll.NewSecretStore(k.HubClient(t), HubNamespace, opts...)
}

// HubKubeconfig writes a kubeconfig acting as the hub, for a process.
func (k *Kube) HubKubeconfig(t testing.TB) string {
	return k.Kubeconfig(t, HubUser, HubGroups...)
}

// ResetEnrollment deletes every enrollment Secret (labelled
// nave.io/enroll) of HubNamespace, as the admin: the next test starts
// with none.
func (k *Kube) ResetEnrollment(t testing.TB) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(k.Admin)
	if err != nil {
		t.Fatal(err)
	}
	err = dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}).Namespace(HubNamespace).
		DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "nave.io/enroll"})
	if err != nil {
		t.Fatal(err)
	}
}
