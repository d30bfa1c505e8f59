package main

import (
	"strings"
	"testing"
	"time"

	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/hub/enroll"
	"github.com/navemesh/nave/hub/enroll/enrolltest"
	"github.com/navemesh/nave/hub/servingcert"
	"github.com/navemesh/nave/shared/tlspin"
)

// With the hub's state in Kubernetes Secrets (state.store kubernetes),
// navectl works on the same Secrets as the hub, as the hub's service
// account, with no state dir.
func TestStateInKubernetesSecrets(t *testing.T) {
	k := enrolltest.StartKube(t)
	state := []string{"--state-store", "kubernetes", "--kubeconfig", k.HubKubeconfig(t)}
	run := func(args ...string) result {
		t.Helper()
		return navectlRun(t, append(args, state...)...)
	}

	// Before any hub started there is no serving CA to pin.
	r := run("ca-hash")
	if r.code != 1 || !strings.Contains(r.stderr, "nave-system/nave-serving-ca-hub holds no root-cert.pem") {
		t.Errorf("ca-hash before the hub started: exit %d: %s", r.code, r.stderr)
	}
	// The hub's serving CA, as a hub replica makes it.
	store := ca.NewSecretStore(k.HubClient(t), enrolltest.HubNamespace, ca.WithSecretPrefix(servingcert.SecretPrefix))
	serving, err := servingcert.New(t.Context(), store, []string{"localhost"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rootPEM, _ := serving.RootsPEM()
	pins, _ := tlspin.HashesPEM(rootPEM)
	if r := run("ca-hash"); r.code != 0 || r.stdout != pins[0]+"\n" {
		t.Errorf("ca-hash: exit %d: %q %s; want %s", r.code, r.stdout, r.stderr, pins[0])
	}

	r = run("token", "create", "--mesh", "acme", "--cluster", "east", "--namespaces", "shop")
	if r.code != 0 {
		t.Fatalf("token create: exit %d: %s", r.code, r.stderr)
	}
	tok := strings.TrimSpace(r.stdout)
	// A hub replica redeems it from the Secrets.
	info, err := k.HubStore(t).Redeem(t.Context(), tok)
	if err != nil || info.Mesh != "acme" || info.Cluster != "east" || strings.Join(info.Namespaces, ",") != "shop" {
		t.Fatalf("the hub redeemed %+v, %v", info, err)
	}
	if err := k.HubStore(t).RecordCluster(t.Context(), enroll.ClusterRecord{Mesh: "acme", Cluster: "east", TrustDomain: "acme.example",
		Serial: "2a", NotAfter: time.Now().Add(time.Hour), EnrolledAt: time.Now(), TokenID: info.ID}); err != nil {
		t.Fatal(err)
	}
	if r := run("token", "list"); r.code != 0 || !strings.Contains(r.stdout, info.ID) || !strings.Contains(r.stdout, "used") {
		t.Errorf("token list: exit %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := run("cluster", "list"); r.code != 0 || !strings.Contains(r.stdout, "acme.example") || !strings.Contains(r.stdout, "enrolled") {
		t.Errorf("cluster list: exit %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := run("cluster", "revoke", "--mesh", "acme", "--cluster", "east"); r.code != 0 {
		t.Fatalf("cluster revoke: exit %d: %s", r.code, r.stderr)
	}
	// Every replica sees it.
	if ok, err := k.HubStore(t).Revoked(t.Context(), "acme", "east"); err != nil || !ok {
		t.Errorf("after navectl cluster revoke, the hub's Revoked = %v, %v", ok, err)
	}
	if r := run("cluster", "list"); !strings.Contains(r.stdout, "revoked") {
		t.Errorf("cluster list after revoke:\n%s", r.stdout)
	}
	if r := run("token", "create", "--mesh", "acme", "--cluster", "east"); r.code != 1 || !strings.Contains(r.stderr, "revoked") {
		t.Errorf("token for a revoked cluster: exit %d: %s", r.code, r.stderr)
	}

	// Someone the RBAC does not allow gets a refusal naming the Secret.
	denied := navectlRun(t, "token", "create", "--mesh", "acme", "--cluster", "west", "--state-store", "kubernetes",
		"--kubeconfig", k.Kubeconfig(t, "mallory"))
	if denied.code != 1 || !strings.Contains(denied.stderr, "nave-system/nave-enroll-revoked-acme.west") || !strings.Contains(denied.stderr, "forbidden") {
		t.Errorf("token create as mallory: exit %d: %s", denied.code, denied.stderr)
	}
	// Another namespace holds another hub's state (here: none).
	if r := run("token", "list", "--state-namespace", "default"); r.code != 1 || !strings.Contains(r.stderr, "secrets of namespace default") {
		t.Errorf("token list in namespace default: exit %d: %s", r.code, r.stderr)
	}
}
