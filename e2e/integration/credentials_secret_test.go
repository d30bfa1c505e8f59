package integration

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/navemesh/nave/hub/enroll/enrolltest"
	"github.com/navemesh/nave/spoke/enroll"
)

// A spoke keeping its credentials in a Secret (hub.credentialsSecret),
// against a real API server with deploy/spoke's RBAC, acting as the
// spoke's service account: enrollment creates the Secret, a renewal
// replaces key and certificate in it, a restarted spoke (a new store on
// the same Secret) loads the renewed credentials; a Secret that is not
// there is "not enrolled", one that does not parse is an error naming it,
// and the spoke can read no other Secret.
func TestCredentialsInASecret(t *testing.T) {
	admin, spoke := startSpokeKube(t)
	h := enrolltest.StartHub(t, enrolltest.HubOptions{})
	tok, _, _ := h.Store.CreateToken(t.Context(), enrolltest.MeshA, "east", time.Hour)
	store := enroll.SecretStore{Client: spoke, Namespace: "nave-system", Name: "nave-spoke-credentials"}

	if _, err := store.Load(t.Context()); !errors.Is(err, enroll.ErrNotEnrolled) {
		t.Fatalf("Load before enrollment: %v, want ErrNotEnrolled", err)
	}
	opts := enroll.Options{Address: h.Addr, ServerName: enrolltest.ServerName, HubCAHash: enroll.CAHash(h.Serving.Cert), Store: store}
	first, err := enroll.Enroll(testCtx(t), opts, tok)
	if err != nil {
		t.Fatal(err)
	}
	sec, err := admin.CoreV1().Secrets("nave-system").Get(t.Context(), "nave-spoke-credentials", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"identity.json", "hub-ca.pem", "credentials.pem"} {
		if len(sec.Data[k]) == 0 {
			t.Errorf("the Secret has no %s (keys %v)", k, keys(sec.Data))
		}
	}
	if sec.Labels["nave.io/cluster"] != "east" {
		t.Errorf("Secret labels %v", sec.Labels)
	}

	r, err := enroll.NewRenewer(enroll.RenewerOptions{Address: h.Addr, ServerName: enrolltest.ServerName, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Credentials().Certificate.Leaf.Equal(first.Certificate.Leaf) {
		t.Fatal("the Renewer did not load the enrolled certificate from the Secret")
	}
	if err := r.Renew(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	// A restart: a new store on the same Secret.
	again := enroll.SecretStore{Client: spoke, Namespace: "nave-system", Name: "nave-spoke-credentials"}
	loaded, err := again.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !loaded.Certificate.Leaf.Equal(r.Credentials().Certificate.Leaf) || loaded.Certificate.Leaf.Equal(first.Certificate.Leaf) {
		t.Error("the Secret does not hold the renewed certificate")
	}
	if loaded.Mesh != enrolltest.MeshA || loaded.Cluster != "east" {
		t.Errorf("loaded %s/%s", loaded.Mesh, loaded.Cluster)
	}

	// Garbage is an error that names the Secret, not "not enrolled".
	sec, _ = admin.CoreV1().Secrets("nave-system").Get(t.Context(), "nave-spoke-credentials", metav1.GetOptions{})
	sec.Data["credentials.pem"] = []byte("-----BEGIN GARBAGE-----")
	if _, err := admin.CoreV1().Secrets("nave-system").Update(t.Context(), sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := again.Load(t.Context()); err == nil || errors.Is(err, enroll.ErrNotEnrolled) ||
		!strings.Contains(err.Error(), "Secret nave-system/nave-spoke-credentials") {
		t.Errorf("Load of a broken Secret: %v", err)
	}
	// The spoke's RBAC reaches this Secret only.
	other := enroll.SecretStore{Client: spoke, Namespace: "nave-system", Name: "nave-spoke-webhook-ca-x"}
	if _, err := other.Load(t.Context()); err == nil || errors.Is(err, enroll.ErrNotEnrolled) || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("Load of another Secret: %v, want forbidden", err)
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
