package servingcert

import (
	"bytes"
	"context"
	"crypto/x509"
	"os"
	"sync"
	"testing"

	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/hub/enroll/enrolltest"
	"github.com/navemesh/nave/shared/spiffeid"
)

func TestServingCertificate(t *testing.T) {
	dir := t.TempDir()
	store := openStore(t, ca.StoreDir, dir, "")
	// a wildcard, as deploy/hub's tls.hosts names every replica's own name (decision 051)
	c, err := New(context.Background(), store, []string{"localhost", "127.0.0.1", "hub.example.com", "*.nave-hub-replicas.nave-system.svc"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := c.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	// The chain carries the serving CA, so a spoke can pin it.
	if len(cert.Certificate) != 2 {
		t.Fatalf("chain of %d certificates, want leaf and serving CA", len(cert.Certificate))
	}
	rootPEM, err := os.ReadFile(RootPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := RootPEM(context.Background(), store); err != nil || !bytes.Equal(b, rootPEM) {
		t.Errorf("RootPEM = %d bytes, %v; want %s", len(b), err, RootPath(dir))
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(rootPEM)
	for _, name := range []string{"localhost", "127.0.0.1", "hub.example.com", "nave-hub-0.nave-hub-replicas.nave-system.svc"} {
		if _, err := cert.Leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			t.Errorf("serving certificate for %s: %v", name, err)
		}
	}
	for _, name := range []string{"evil.example.com", "a.nave-hub-0.nave-hub-replicas.nave-system.svc"} {
		if _, err := cert.Leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err == nil {
			t.Errorf("serving certificate valid for %s, a name not in hosts", name)
		}
	}
	// It names the hub's SPIFFE ID, which polled spokes require of the hub
	// as a client.
	if len(cert.Leaf.URIs) != 1 || cert.Leaf.URIs[0].String() != spiffeid.Hub.String() {
		t.Errorf("serving certificate names %v, want %s", cert.Leaf.URIs, spiffeid.Hub)
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("serving certificate not valid for client authentication: %v", err)
	}
	// A restart keeps the serving CA (what spokes pinned).
	again, err := New(context.Background(), openStore(t, ca.StoreDir, dir, ""), []string{"localhost"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p1, _ := c.RootsPEM()
	p2, _ := again.RootsPEM()
	if !bytes.Equal(p1, p2) || !bytes.Equal(p1, rootPEM) {
		t.Error("the serving CA changed across a restart")
	}
	// Before any hub started there is nothing to pin, and RootPEM says so
	// without creating a CA.
	empty := openStore(t, ca.StoreDir, t.TempDir(), "")
	if _, err := RootPEM(context.Background(), empty); err == nil {
		t.Error("RootPEM of an empty store succeeded")
	}
}

// With state.store=kubernetes the serving CA is Secret nave-serving-ca-hub
// (against a real API server, as the hub's service account): replicas
// racing at their first start end with one, a restarted one loads it, and
// a tenant mesh named "hub" (nave-ca-hub) is another CA.
func TestServingCAInASecret(t *testing.T) {
	k := enrolltest.StartKube(t)
	const replicas = 3
	var gets sync.WaitGroup
	gets.Add(replicas)
	certs := make([]*Cert, replicas)
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		// Each replica has its own client; none creates before all of
		// them found no CA.
		client := &barrierClient{SecretClient: k.HubClient(t), gets: &gets}
		store := ca.NewSecretStore(client, enrolltest.HubNamespace, ca.WithSecretPrefix(SecretPrefix))
		wg.Go(func() { certs[i], errs[i] = New(t.Context(), store, []string{"localhost"}, nil) })
	}
	wg.Wait()
	var first []byte
	for i := range replicas {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		p, _ := certs[i].RootsPEM()
		if first == nil {
			first = p
		} else if !bytes.Equal(p, first) {
			t.Fatalf("replica %d serves another serving CA", i)
		}
	}
	sec, err := k.AdminSecrets.Get(t.Context(), enrolltest.HubNamespace, "nave-serving-ca-hub")
	if err != nil || !bytes.Equal(sec.Data[ca.FileRootCert], first) {
		t.Fatalf("Secret nave-serving-ca-hub: %v; want the replicas' CA", err)
	}
	store := openStore(t, ca.StoreKubernetes, "", k.HubKubeconfig(t))
	if got := store.Location(Mesh); got != "nave-system/nave-serving-ca-hub" {
		t.Errorf("Location = %q", got)
	}
	if b, err := RootPEM(t.Context(), store); err != nil || !bytes.Equal(b, first) {
		t.Errorf("RootPEM = %d bytes, %v", len(b), err)
	}
	again, err := New(t.Context(), store, []string{"localhost"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := again.RootsPEM(); !bytes.Equal(p, first) {
		t.Error("after a restart the hub serves another serving CA")
	}
	// A tenant mesh named "hub" gets a CA of its own.
	tenants := ca.NewSecretStore(k.HubClient(t), enrolltest.HubNamespace)
	auth, err := ca.New(tenants, ca.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := auth.Load(t.Context(), ca.Mesh{Name: "hub", TrustDomain: "tenant.example"}); err != nil {
		t.Fatal(err)
	}
	if p, _ := auth.RootsPEM("hub"); bytes.Equal(p, first) {
		t.Error("a tenant mesh named hub shares the hub's serving CA")
	}
}

func openStore(t *testing.T, kind, dir, kubeconfig string) ca.LocatedStore {
	t.Helper()
	s, err := OpenStore(kind, dir, enrolltest.HubNamespace, kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// barrierClient holds its Create until every replica's first Get was
// answered, so that they all find no CA before any creates one.
type barrierClient struct {
	ca.SecretClient
	gets *sync.WaitGroup
	once sync.Once
}

func (b *barrierClient) Get(ctx context.Context, ns, name string) (*ca.Secret, error) {
	s, err := b.SecretClient.Get(ctx, ns, name)
	b.once.Do(b.gets.Done)
	return s, err
}

func (b *barrierClient) Create(ctx context.Context, s *ca.Secret) error {
	b.gets.Wait()
	return b.SecretClient.Create(ctx, s)
}
