package ca

import (
	"context"
	"crypto/x509"
	"net"
	"testing"
	"time"

	"github.com/navemesh/nave/shared/certreq"
	"github.com/navemesh/nave/shared/certreq/certreqtest"
)

func TestSignClusterIssuesTheClusterIDAndItsServerNames(t *testing.T) {
	a := newAuthority(t, t.TempDir(), Options{}, mesh1, mesh2)
	// Whatever identity the request asks for, the certificate names the
	// cluster; the request's DNS and IP names (its fallback server's) are
	// carried.
	csr := certreqtest.New(t, certreqtest.ECKey(t), certreqtest.Template{URIs: []string{"spiffe://m2.example/ns/x/sa/y"}, DNS: []string{"fallback.east.example"}, IPs: []net.IP{net.ParseIP("10.0.0.1")}})
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
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != "spiffe://m1.example/nave/cluster/east" ||
		len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "fallback.east.example" || len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal(net.ParseIP("10.0.0.1")) {
		t.Fatalf("SANs: URIs %v DNS %v IPs %v; want spiffe://m1.example/nave/cluster/east, fallback.east.example, 10.0.0.1", leaf.URIs, leaf.DNSNames, leaf.IPAddresses)
	}
	// A request with no names gets the cluster's ID alone.
	bare := parseChain(t, must(a.SignCluster(context.Background(), "m1", "east", certreqtest.New(t, certreqtest.ECKey(t), certreqtest.Template{}), time.Hour)))[0]
	if len(bare.URIs) != 1 || len(bare.DNSNames) != 0 || len(bare.IPAddresses) != 0 {
		t.Errorf("a request without names: URIs %v DNS %v IPs %v; want the cluster ID alone", bare.URIs, bare.DNSNames, bare.IPAddresses)
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

func TestSignClusterRefusesServerNamesItMayNotCarry(t *testing.T) {
	a := newAuthority(t, t.TempDir(), Options{HubNames: []string{"hub.example", "10.9.9.9", "::1", "*.nave-hub-gossip.nave-system.svc"}}, mesh1)
	for name, tc := range map[string]struct {
		tmpl certreqtest.Template
		says string
	}{
		"wildcard":       {certreqtest.Template{DNS: []string{"*.east.example"}}, `DNS SAN "*.east.example": not a DNS name`},
		"upper case":     {certreqtest.Template{DNS: []string{"Fallback.example"}}, `DNS SAN "Fallback.example": not a DNS name`},
		"trailing dot":   {certreqtest.Template{DNS: []string{"fallback.example."}}, `DNS SAN "fallback.example.": not a DNS name`},
		"unspecified":    {certreqtest.Template{IPs: []net.IP{net.IPv4zero}}, "IP SAN 0.0.0.0: the unspecified address"},
		"hub's name":     {certreqtest.Template{DNS: []string{"fallback.example", "hub.example"}}, `DNS SAN "hub.example": a name of the hub (tls.hosts)`},
		"hub's wildcard": {certreqtest.Template{DNS: []string{"nave-hub-0.nave-hub-gossip.nave-system.svc"}}, `DNS SAN "nave-hub-0.nave-hub-gossip.nave-system.svc": a name of the hub (tls.hosts)`},
		"hub's IP":       {certreqtest.Template{IPs: []net.IP{net.ParseIP("10.9.9.9")}}, "IP SAN 10.9.9.9: an address of the hub (tls.hosts)"},
		"hub's IPv6":     {certreqtest.Template{IPs: []net.IP{net.IPv6loopback}}, "IP SAN ::1: an address of the hub"},
		"too many":       {certreqtest.Template{DNS: []string{"a.example", "b.example", "c.example"}, IPs: []net.IP{net.ParseIP("10.0.0.1"), net.ParseIP("10.0.0.2")}}, "5 DNS and IP SANs; a cluster certificate carries at most 4"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := a.SignCluster(context.Background(), "m1", "east", certreqtest.New(t, certreqtest.ECKey(t), tc.tmpl), time.Hour)
			wantErrorSays(t, err, tc.says)
			if r, ok := certreq.ReasonOf(err); !ok || r != certreq.ReasonIdentityNotAllowed {
				t.Errorf("reason %q, want %q", r, certreq.ReasonIdentityNotAllowed)
			}
		})
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
