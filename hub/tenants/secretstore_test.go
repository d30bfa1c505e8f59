package tenants_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/hub/enroll/enrolltest"
	"github.com/navemesh/nave/hub/tenants"
)

// The Secret store runs against a real kube-apiserver with deploy/hub's
// RBAC applied, acting as the hub's service account: each store a
// replica with its own client.
func TestSecretStore(t *testing.T) {
	k := enrolltest.StartKube(t)
	reset := func(t *testing.T) {
		dyn, err := dynamic.NewForConfig(k.Admin)
		if err != nil {
			t.Fatal(err)
		}
		err = dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}).Namespace(enrolltest.HubNamespace).
			DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: tenants.LabelKind})
		if err != nil {
			t.Fatal(err)
		}
	}
	testStoreContract(t, func(t *testing.T) func() *tenants.Store {
		reset(t)
		return func() *tenants.Store { return tenants.NewSecretStore(k.HubClient(t), enrolltest.HubNamespace) }
	})

	// A vendor applies a spec Secret (from git): the hub records it.
	t.Run("SpecSecretAppliedByTheVendor", func(t *testing.T) {
		reset(t)
		s := newService(t, tenants.NewSecretStore(k.HubClient(t), enrolltest.HubNamespace), tenants.Options{})
		err := k.AdminSecrets.Create(t.Context(), &ca.Secret{Name: "nave-mesh-gitops", Namespace: enrolltest.HubNamespace,
			Labels: map[string]string{tenants.LabelKind: "spec"},
			Data:   map[string][]byte{tenants.SpecKey: spec("gitops", "gitops.example")}})
		if err != nil {
			t.Fatal(err)
		}
		// Taken up once two reads agree.
		for range 2 {
			if _, err := s.Refresh(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		if !s.Registry().Hosted("gitops") {
			t.Fatalf("meshes %v: the applied spec was not recorded", s.Registry().Names())
		}
		secs, err := k.AdminSecrets.List(t.Context(), enrolltest.HubNamespace, tenants.LabelKind)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, sec := range secs {
			names = append(names, sec.Name)
		}
		if got := strings.Join(names, " "); got != "nave-mesh-gitops nave-meshstatus-gitops" {
			t.Errorf("secrets %s", got)
		}
	})
}
