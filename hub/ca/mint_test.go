package ca

import (
	"context"
	"crypto/tls"
	"testing"
	"time"
)

// mintOnce mints a workload certificate in mesh1 and checks it.
func mintOnce(t testing.TB, a *Authority) {
	id := mustID(t, "spiffe://m1.example/ns/shop/sa/cart")
	m, err := a.Mint(context.Background(), "m1", SignOptions{Identities: []ID{id}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.X509KeyPair(m.ChainPEM, m.KeyPEM); err != nil {
		t.Fatalf("the minted key does not match its certificate: %v", err)
	}
	roots, _ := a.Roots("m1")
	verifyLeaf(t, parseChain(t, m.ChainPEM), roots, time.Now())
	if len(m.Leaf.URIs) != 1 || m.Leaf.URIs[0].String() != id.String() {
		t.Fatalf("minted %v, want %s", m.Leaf.URIs, id)
	}
}

// TestMint is also BenchmarkMint's twin: it runs mintOnce once.
func TestMint(t *testing.T) {
	a := newAuthority(t, t.TempDir(), Options{}, mesh1)
	mintOnce(t, a)
	if _, err := a.Mint(context.Background(), "m1", SignOptions{}); err == nil {
		t.Error("minted without an identity")
	}
	if _, err := a.Mint(context.Background(), "m1", SignOptions{Identities: []ID{mustID(t, "spiffe://m2.example/ns/a/sa/b")}}); err == nil {
		t.Error("minted an identity of another trust domain")
	}
}

// BenchmarkMint is what an Envoy's SDS stream costs the hub at connect and
// at each renewal: a P-256 key and a signed certificate.
func BenchmarkMint(b *testing.B) {
	a := newAuthority(b, b.TempDir(), Options{}, mesh1)
	b.ReportAllocs()
	for range b.N {
		mintOnce(b, a)
	}
}
