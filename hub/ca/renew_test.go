package ca

import (
	"crypto/x509"
	"testing"
	"time"

	"github.com/navemesh/nave/shared/certreq/certreqtest"
)

func TestRenewAt(t *testing.T) {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	cert := &x509.Certificate{NotBefore: start, NotAfter: start.Add(100 * time.Hour)}

	if got, want := RenewAt(cert), start.Add(80*time.Hour); !got.Equal(want) {
		t.Errorf("RenewAt = %s, want %s (80 %%)", got, want)
	}
	// A certificate without a lifetime is due at once.
	if at := RenewAt(&x509.Certificate{NotBefore: start, NotAfter: start}); !at.Equal(start) {
		t.Errorf("zero lifetime: %s", at)
	}
}

// TestRenewAtIssued: the leaf the CA issues with the default TTL is due
// after about 19 h 12 min.
func TestRenewAtIssued(t *testing.T) {
	a := newAuthority(t, t.TempDir(), Options{}, mesh1)
	chain, err := a.Sign(ctx, "m1", certreqtest.For(t, uriA), SignOptions{Identities: []ID{mustID(t, uriA)}})
	if err != nil {
		t.Fatal(err)
	}
	leaf := parseChain(t, chain)[0]
	if d := RenewAt(leaf).Sub(leaf.NotBefore); d < 19*time.Hour || d > 19*time.Hour+15*time.Minute {
		t.Errorf("renew %s after NotBefore, want about 80 %% of 24 h", d)
	}
}
