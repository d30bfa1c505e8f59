package ca

import (
	"context"
	"crypto/x509"
	"net"
	"testing"
	"time"

	"github.com/navemesh/nave/shared/certreq/certreqtest"
)

func TestSignClusterIssuesOnlyTheClusterID(t *testing.T) {
	a := newAuthority(t, t.TempDir(), Options{}, mesh1, mesh2)
	// Whatever the request asks for — another identity, a DNS and an IP
	// name — the certificate names the cluster and nothing else.
	csr := certreqtest.New(t, certreqtest.ECKey(t), certreqtest.Template{URIs: []string{"spiffe://m2.example/ns/x/sa/y"}, DNS: []string{"hub.example"}, IPs: []net.IP{net.ParseIP("10.0.0.1")}})
	chainPEM, err := a.SignCluster(context.Background(), "m1", "east", csr, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	chain := parseChain(t, chainPEM)
	roots, err := a.Roots("m1")
	if err != nil {
		t.Fatal(err)
	}
	verifyLeaf(t, chain, roots, time.Now())
	leaf := chain[0]
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != "spiffe://m1.example/nave/cluster/east" || len(leaf.DNSNames) != 0 || len(leaf.IPAddresses) != 0 {
		t.Fatalf("SANs: URIs %v DNS %v IPs %v; want only spiffe://m1.example/nave/cluster/east", leaf.URIs, leaf.DNSNames, leaf.IPAddresses)
	}
	if d := leaf.NotAfter.Sub(leaf.NotBefore); d < time.Hour || d > time.Hour+2*time.Minute {
		t.Errorf("lifetime %s, want about 1h", d)
	}
	// It does not verify against the other mesh's root.
	other, _ := a.Roots("m2")
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: other, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("a cluster certificate of m1 verifies against m2's root")
	}
	if _, err := a.SignCluster(context.Background(), "m1", "Not_A_Label", csr, time.Hour); err == nil {
		t.Error("a cluster name that is not a DNS label was signed")
	}
	if _, err := a.SignCluster(context.Background(), "nope", "east", csr, time.Hour); err == nil {
		t.Error("a mesh without a CA signed")
	}
	if b, err := a.TrustBundlePEM("m1"); err != nil || len(b) == 0 {
		t.Errorf("TrustBundlePEM: %d bytes, %v", len(b), err)
	}
}

func TestLoadRefusesAnotherTrustDomainForAGeneratedRoot(t *testing.T) {
	dir := t.TempDir()
	newAuthority(t, dir, Options{}, mesh1)
	store, _ := NewDirStore(dir)
	a, _ := New(store, Options{})
	err := a.Load(context.Background(), Mesh{Name: "m1", TrustDomain: "elsewhere.example"})
	wantErrorSays(t, err, `generated for trust domain "m1.example", not "elsewhere.example"`)
}

// takenStore is a Store whose place for every mesh exists but holds nothing
// (an empty Secret made by hand).
type takenStore struct{}

func (takenStore) Get(context.Context, string) (map[string][]byte, error) {
	return map[string][]byte{}, nil
}
func (takenStore) Create(context.Context, string, map[string][]byte) error { return ErrExist }

func TestLoadNamesAnEmptyPlaceThatIsTaken(t *testing.T) {
	a, err := New(takenStore{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	wantErrorSays(t, a.Load(context.Background(), mesh1), "holds none of", "remove it")
}
