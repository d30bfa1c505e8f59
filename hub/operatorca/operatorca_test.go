package operatorca

import (
	"crypto/x509"
	"net/url"
	"strings"
	"testing"

	"github.com/navemesh/nave/hub/ca"
)

func leaf(t *testing.T, uris ...string) *x509.Certificate {
	t.Helper()
	c := &x509.Certificate{}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		c.URIs = append(c.URIs, u)
	}
	return c
}

// An operator's identity says its scope, and nothing else reads as one.
func TestScopeFromIdentity(t *testing.T) {
	vendor, err := ID("", "root")
	if err != nil || vendor.String() != "spiffe://operators.nave.internal/vendor/root" {
		t.Fatalf("ID(vendor root) = %s, %v", vendor, err)
	}
	tenant, err := ID("acme", "alice")
	if err != nil || tenant.String() != "spiffe://operators.nave.internal/mesh/acme/alice" {
		t.Fatalf("ID(acme alice) = %s, %v", tenant, err)
	}
	if s, err := Scope(leaf(t, vendor.String())); err != nil || !s.Vendor || s.Mesh != "" || !s.Allows("globex") {
		t.Errorf("vendor scope = %+v, %v", s, err)
	}
	if s, err := Scope(leaf(t, tenant.String())); err != nil || s.Vendor || s.Mesh != "acme" || s.Allows("globex") || !s.Allows("acme") {
		t.Errorf("tenant scope = %+v, %v", s, err)
	}
	for _, c := range []struct {
		uris []string
		want string
	}{
		{nil, "0 URI SANs"},
		{[]string{vendor.String(), tenant.String()}, "2 URI SANs"},
		{[]string{"spiffe://cluster.local/ns/nave-system/sa/root"}, "not an operator identity"},
		{[]string{"spiffe://acme.example/nave/cluster/east"}, "not an operator identity"},
		{[]string{"spiffe://operators.nave.internal/vendor"}, "neither"},
		{[]string{"spiffe://operators.nave.internal/mesh/acme"}, "neither"},
		{[]string{"spiffe://operators.nave.internal/admin/root"}, "neither"},
	} {
		if s, err := Scope(leaf(t, c.uris...)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Scope(%v) = %+v, %v; want an error saying %q", c.uris, s, err, c.want)
		}
	}
	for _, bad := range [][2]string{{"", "Root"}, {"Acme", "alice"}, {"acme", ""}, {"acme", "a/b"}} {
		if id, err := ID(bad[0], bad[1]); err == nil {
			t.Errorf("ID(%q, %q) = %s, want an error", bad[0], bad[1], id)
		}
	}
}

// The CA issues operator certificates that verify against its roots and
// read back as their scope; it is created once and then loaded.
func TestLoadAndIssue(t *testing.T) {
	store, err := ca.NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a, err := Load(t.Context(), store, nil)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := ID("acme", "alice")
	m, err := a.Mint(t.Context(), Mesh, ca.SignOptions{Identities: []ca.ID{id}})
	if err != nil {
		t.Fatal(err)
	}
	again, err := Load(t.Context(), store, nil)
	if err != nil {
		t.Fatal(err)
	}
	roots, err := again.Roots(Mesh)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("an operator certificate does not verify as a client against the reloaded CA: %v", err)
	}
	if s, err := Scope(m.Leaf); err != nil || s.Mesh != "acme" {
		t.Errorf("issued certificate's scope = %+v, %v", s, err)
	}
}
