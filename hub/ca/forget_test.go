package ca

import (
	"bytes"
	"testing"

	"github.com/navemesh/nave/shared/certreq/certreqtest"
)

// A forgotten mesh signs and verifies nothing and its trust domain names
// no mesh; loading it again finds the same root (the store kept it). A
// destroyed mesh's next Load generates a new root.
func TestForgetAndDestroy(t *testing.T) {
	a := newAuthority(t, t.TempDir(), Options{}, mesh1, mesh2)
	first, err := a.RootsPEM(mesh1.Name)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Forget(mesh1.Name) {
		t.Fatal("Forget: mesh1 was loaded")
	}
	if a.Forget(mesh1.Name) {
		t.Error("Forget again: reported the mesh loaded")
	}
	if _, err := a.TrustDomain(mesh1.Name); err == nil {
		t.Error("TrustDomain of a forgotten mesh: no error")
	}
	if _, ok := a.MeshOf(mesh1.TrustDomain); ok {
		t.Error("MeshOf: the forgotten mesh's trust domain still names it")
	}
	if _, err := a.Sign(ctx, mesh1.Name, certreqtest.For(t, uriA), SignOptions{Identities: []ID{mustID(t, uriA)}}); err == nil {
		t.Error("Sign for a forgotten mesh: no error")
	}
	if got := a.Meshes(); len(got) != 1 || got[0] != mesh2 {
		t.Errorf("Meshes = %v, want only %v", got, mesh2)
	}
	if err := a.Load(ctx, mesh1); err != nil {
		t.Fatal(err)
	}
	again, _ := a.RootsPEM(mesh1.Name)
	if !bytes.Equal(first, again) {
		t.Error("Load after Forget: a new root; the store's should have been kept")
	}

	if err := a.Destroy(ctx, mesh1.Name); err != nil {
		t.Fatal(err)
	}
	if _, err := a.TrustDomain(mesh1.Name); err == nil {
		t.Error("TrustDomain of a destroyed mesh: no error")
	}
	if err := a.Destroy(ctx, mesh1.Name); err != nil {
		t.Errorf("Destroy of a mesh with no CA: %v", err)
	}
	if err := a.Load(ctx, mesh1); err != nil {
		t.Fatal(err)
	}
	fresh, _ := a.RootsPEM(mesh1.Name)
	if bytes.Equal(first, fresh) {
		t.Error("Load after Destroy: the destroyed root came back")
	}
	if other, _ := a.RootsPEM(mesh2.Name); bytes.Equal(other, fresh) || len(other) == 0 {
		t.Error("mesh2's CA changed")
	}
}
