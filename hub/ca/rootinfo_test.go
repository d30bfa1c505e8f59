package ca

import "testing"

func TestGeneratedRootMesh(t *testing.T) {
	a := newAuthority(t, t.TempDir(), Options{}, mesh1)
	roots, err := a.RootsPEM(mesh1.Name)
	if err != nil {
		t.Fatal(err)
	}
	root := parseChain(t, roots)[0]
	if mesh, td, ok := GeneratedRootMesh(root); !ok || mesh != mesh1.Name || td != mesh1.TrustDomain {
		t.Errorf("generated root: GeneratedRootMesh = %q, %q, %v; want %q, %q, true", mesh, td, ok, mesh1.Name, mesh1.TrustDomain)
	}
	if mesh, td, ok := GeneratedRootMesh(newTestCA(t, "plugged root", nil).cert); ok {
		t.Errorf("a root nave did not generate: GeneratedRootMesh = %q, %q, true; want false", mesh, td)
	}
}
