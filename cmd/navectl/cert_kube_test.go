package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/internal/kubetest"
)

// With the hub's CAs in Kubernetes Secrets (ca.store kubernetes), cert
// issue signs from Secret nave-ca-MESH as the hub's service account, with
// no state dir.
func TestCertIssueFromKubernetesSecret(t *testing.T) {
	c := kubetest.Start(t, kubetest.Options{})
	for _, f := range []string{"namespace.yaml", "rbac.yaml"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "hub", f))
		if err != nil {
			t.Fatal(err)
		}
		c.Apply(t, b)
	}
	kubeconfig := c.Kubeconfig(t, "system:serviceaccount:nave-system:nave-hub", "system:serviceaccounts")
	out := t.TempDir()
	r := navectlRun(t, "cert", "issue", "--ca-store", "kubernetes", "--kubeconfig", kubeconfig, "--mesh", "acme",
		"--trust-domain", "acme.example", "--namespace", "shop", "--service-account", "cart", "--out", out)
	if r.code != 0 || !strings.Contains(r.stderr, "nave-system/nave-ca-acme") {
		t.Fatalf("cert issue: exit %d: %s (want a note naming the Secret it created)", r.code, r.stderr)
	}
	client, err := ca.NewSecretClient(c.Admin)
	if err != nil {
		t.Fatal(err)
	}
	blobs, err := ca.NewSecretStore(client, "nave-system").Get(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(blobs[ca.FileRootCert]) {
		t.Fatalf("Secret nave-ca-acme holds no root: %v", blobs)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(out, fileCertChain), filepath.Join(out, fileKey))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: roots}); err != nil || pair.Leaf.URIs[0].String() != "spiffe://acme.example/ns/shop/sa/cart" {
		t.Errorf("issued %v: %v", pair.Leaf.URIs, err)
	}

	// Someone the RBAC does not allow gets a refusal naming the Secret.
	denied := navectlRun(t, "cert", "issue", "--ca-store", "kubernetes", "--kubeconfig", c.Kubeconfig(t, "mallory"), "--mesh", "acme",
		"--trust-domain", "acme.example", "--namespace", "shop", "--service-account", "cart", "--out", t.TempDir())
	if denied.code != 1 || !strings.Contains(denied.stderr, "nave-ca-acme") || !strings.Contains(denied.stderr, "forbidden") {
		t.Errorf("cert issue as mallory: exit %d: %s", denied.code, denied.stderr)
	}
	if r := navectlRun(t, "cert", "issue", "--ca-store", "vault", "--mesh", "acme", "--namespace", "shop", "--service-account", "cart", "--out", out); r.code != 2 {
		t.Errorf("--ca-store vault: exit %d: %s, want a usage error", r.code, r.stderr)
	}
	if r := navectlRun(t, "cert", "issue", "--mesh", "acme", "--namespace", "shop", "--service-account", "cart", "--out", out); r.code != 2 || !strings.Contains(r.stderr, "--state-dir is required") {
		t.Errorf("dir store without --state-dir: exit %d: %s, want a usage error", r.code, r.stderr)
	}
}
