package webhookcert

import (
	"crypto/x509"
	"log/slog"
	"testing"
	"time"
)

// evolve applies the rules a Manager follows to a Secret's CAs at now:
// create the first CA, add a successor when due, drop expired ones.
func evolve(t *testing.T, cas []*authority, validity time.Duration, now time.Time) []*authority {
	t.Helper()
	if !needsSuccessor(cas, now) {
		return cas
	}
	gen := 0
	for _, a := range cas {
		gen = max(gen, a.gen)
	}
	a, err := newAuthority(gen+1, validity, now)
	if err != nil {
		t.Fatal(err)
	}
	return append(valid(cas, now), a)
}

func TestFirstCASignsAtOnce(t *testing.T) {
	now := time.Now()
	cas := evolve(t, nil, time.Hour, now)
	if len(cas) != 1 || cas[0].gen != 1 || signer(cas, now) != cas[0] {
		t.Fatalf("first CA: %d CAs, signer %v", len(cas), signer(cas, now))
	}
	if needsSuccessor(cas, now.Add(29*time.Minute)) || !needsSuccessor(cas, now.Add(30*time.Minute)) {
		t.Error("a successor is due half way through the span, not before")
	}
	if pem, gen := bundle(cas, now); gen != 1 || string(pem) != string(cas[0].certPEM) {
		t.Errorf("bundle of generation %d: %q", gen, pem)
	}
}

// TestRotationPublishesBeforeSigning walks a second at a time through
// four CA lifetimes, as a Manager would, with the API server's caBundle
// lagging 2 s behind the Secret: every signer was already in that lagging
// bundle, every certificate a replica holds (renewed at half its
// validity, from the CA the rules choose) verifies against it, and no
// more than three CAs are ever in the bundle (a CA lives a span, a
// successor comes every half span).
func TestRotationPublishesBeforeSigning(t *testing.T) {
	const (
		caValidity   = 100 * time.Second
		certValidity = 20 * time.Second
		lag          = 2 * time.Second
	)
	start := time.Now()
	m := &Manager{opts: Options{Hosts: []string{"127.0.0.1", "nave-spoke.nave-system.svc"}, CertValidity: certValidity}, log: slog.New(slog.DiscardHandler), metrics: newMetrics(nil)}
	var cas []*authority
	type published struct {
		at  time.Time
		pem []byte
	}
	var history []published
	for now := start; now.Before(start.Add(4 * caValidity)); now = now.Add(time.Second) {
		cas = evolve(t, cas, caValidity, now)
		pem, _ := bundle(cas, now)
		history = append(history, published{now, pem})
		// What the API server holds: the bundle of lag ago.
		seen := history[0].pem
		for _, h := range history {
			if !h.at.After(now.Add(-lag)) {
				seen = h.pem
			}
		}
		sig := signer(cas, now)
		isPublished := bundleHolds(seen, sig.cert)
		if now.Sub(start) > lag && !isPublished && now.After(sig.signableAt()) {
			t.Fatalf("at %s: the signer (generation %d) is not in the bundle of %s ago", now.Sub(start), sig.gen, lag)
		}
		cur, err := m.renew(cas, sig, isPublished, now)
		if err != nil {
			t.Fatal(err)
		}
		if now.Sub(start) <= lag {
			continue // the API server has no bundle yet
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(seen)
		if _, err := cur.cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, DNSName: "nave-spoke.nave-system.svc"}); err != nil {
			t.Fatalf("at %s: the certificate (CA generation %d) does not verify against the API server's bundle: %v", now.Sub(start), cur.caGen, err)
		}
		if n := len(valid(cas, now)); n > 3 {
			t.Fatalf("at %s: %d CAs in the bundle", now.Sub(start), n)
		}
	}
	if gen := cas[len(cas)-1].gen; gen < 6 {
		t.Errorf("newest CA is generation %d after four lifetimes, want at least 6 (one per half lifetime)", gen)
	}
}

func TestSecretDataRoundTrips(t *testing.T) {
	now := time.Now()
	a1, _ := newAuthority(1, time.Hour, now)
	a3, _ := newAuthority(3, time.Hour, now)
	data := secretData([]*authority{a3, a1})
	data["ca-2.crt"] = []byte("garbage")
	data["ca-4.crt"], data["ca-4.key"] = a1.certPEM, a3.keyPEM // key of another CA
	data["tls.crt"] = []byte("x")
	cas, maxGen, problems := parseAuthorities(data)
	if len(cas) != 2 || cas[0].gen != 1 || cas[1].gen != 3 || maxGen != 4 {
		t.Fatalf("parsed generations %v, max %d", cas, maxGen)
	}
	want := []string{"CA generation 2: no PEM certificate", "CA generation 4: the key is not the certificate's", `data key "tls.crt" is not a CA's (want ca-<generation>.crt or .key)`}
	if len(problems) != len(want) {
		t.Fatalf("problems %q", problems)
	}
	for i := range want {
		if problems[i] != want[i] {
			t.Errorf("problem %d: %q, want %q", i, problems[i], want[i])
		}
	}
	for _, k := range []string{"ca-01.crt", "ca-0.crt", "ca-x.key", "ca-1.pem", "ca--1.crt"} {
		if _, ok := generationOf(k); ok {
			t.Errorf("%s read as a generation", k)
		}
	}
}

func TestIssueStaysWithinItsCA(t *testing.T) {
	now := time.Now()
	ca, _ := newAuthority(1, 10*time.Second, now)
	s, err := issue(ca, []string{"127.0.0.1", "nave-spoke.nave-system.svc"}, time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	if !s.cert.NotAfter.Equal(ca.cert.NotAfter) {
		t.Errorf("certificate ends %s, after its CA (%s)", s.cert.NotAfter, ca.cert.NotAfter)
	}
	if len(s.cert.IPAddresses) != 1 || len(s.cert.DNSNames) != 1 || s.cert.DNSNames[0] != "nave-spoke.nave-system.svc" {
		t.Errorf("SANs %v %v", s.cert.IPAddresses, s.cert.DNSNames)
	}
}
