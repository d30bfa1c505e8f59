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
	if NeedsRenewal(cert, start.Add(79*time.Hour)) || !NeedsRenewal(cert, start.Add(80*time.Hour)) {
		t.Error("NeedsRenewal around 80 %")
	}
	if got, want := (RenewPolicy{Fraction: 0.5}).RenewAt(cert), start.Add(50*time.Hour); !got.Equal(want) {
		t.Errorf("Fraction 0.5: %s, want %s", got, want)
	}
	for _, f := range []float64{-1, 0, 1.5} {
		if got, want := (RenewPolicy{Fraction: f}).RenewAt(cert), start.Add(80*time.Hour); !got.Equal(want) {
			t.Errorf("Fraction %v: %s, want the default %s", f, got, want)
		}
	}

	// Jitter moves renewal earlier, never later, by up to Jitter.
	for r, want := range map[float64]time.Duration{0: 80 * time.Hour, 0.5: 75 * time.Hour, 0.999999999: 70 * time.Hour} {
		p := RenewPolicy{Jitter: 0.1, Rand: func() float64 { return r }}
		if got := p.RenewAt(cert); got.Sub(start).Round(time.Second) != want {
			t.Errorf("jitter 0.1, rand %v: %s after start, want %s", r, got.Sub(start), want)
		}
	}
	p := RenewPolicy{Jitter: 0.2}
	seen := map[time.Time]bool{}
	for range 200 {
		at := p.RenewAt(cert)
		if at.Before(start.Add(60*time.Hour)) || at.After(start.Add(80*time.Hour)) {
			t.Fatalf("jitter 0.2: %s after start, want within [60h, 80h]", at.Sub(start))
		}
		seen[at] = true
	}
	if len(seen) < 100 {
		t.Errorf("jitter gave only %d distinct times in 200 draws", len(seen))
	}
	// Jitter larger than the fraction cannot go before NotBefore.
	if at := (RenewPolicy{Fraction: 0.3, Jitter: 5, Rand: func() float64 { return 0.999 }}).RenewAt(cert); at.Before(start) {
		t.Errorf("renewal %s before NotBefore", at)
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
