package ca

import (
	"context"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/navemesh/nave/shared/certreq/certreqtest"
)

// clock is a settable Options.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// verifies reports whether chainPEM's leaf verifies against roots.
func verifies(t *testing.T, chainPEM []byte, roots *x509.CertPool, at time.Time) bool {
	t.Helper()
	chain := parseChain(t, chainPEM)
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: at,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err == nil
}

func sign(t *testing.T, a *Authority) []byte {
	t.Helper()
	chainPEM, err := a.Sign(context.Background(), "m1", certreqtest.For(t, uriA), SignOptions{Identities: []ID{mustID(t, uriA)}})
	if err != nil {
		t.Fatal(err)
	}
	return chainPEM
}

func rootsOf(t *testing.T, a *Authority) *x509.CertPool {
	t.Helper()
	p, err := a.Roots("m1")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func wantPhase(t *testing.T, a *Authority, phase string, roots int) RotationStatus {
	t.Helper()
	s, err := a.Rotation("m1")
	if err != nil {
		t.Fatal(err)
	}
	if s.Phase != phase || len(s.Roots) != roots {
		t.Fatalf("rotation %s with %d roots, want %s with %d: %+v", s.Phase, len(s.Roots), phase, roots, s)
	}
	return s
}

// TestRotationGenerated runs the three steps on a generated root with two
// Authorities sharing the store (two hub replicas; one runs the steps, as
// navectl does, the other only refreshes).
func TestRotationGenerated(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	start := time.Now()
	clk := &clock{t: start}
	op := newAuthority(t, dir, Options{Now: clk.now}, mesh1)
	hub := newAuthority(t, dir, Options{Now: clk.now}, mesh1)
	oldRoot := rootsOf(t, op)
	oldCert := sign(t, hub)
	wantPhase(t, hub, PhaseNone, 1)

	// Steps out of order are refused and change nothing.
	if _, err := op.SwitchRoot(ctx, "m1", SwitchOptions{}); err == nil || !strings.Contains(err.Error(), "no new root was added") {
		t.Fatalf("switch before add: %v", err)
	}
	if msg, err := op.DropRoot(ctx, "m1", true); err != nil || !strings.Contains(msg, "no previous root") {
		t.Fatalf("drop with nothing to drop: %q, %v", msg, err)
	}

	// 1: add.
	if _, err := op.AddRoot(ctx, "m1", nil); err != nil {
		t.Fatal(err)
	}
	wantPhase(t, op, PhaseAdded, 2)
	if msg, err := op.AddRoot(ctx, "m1", nil); err != nil || !strings.Contains(msg, "already added") {
		t.Fatalf("add again: %q, %v", msg, err)
	}
	if changed, err := hub.Refresh(ctx); err != nil || len(changed) != 1 {
		t.Fatalf("replica refresh: %v, %v", changed, err)
	}
	if changed, err := hub.Refresh(ctx); err != nil || len(changed) != 0 {
		t.Fatalf("second refresh changed %v, %v", changed, err)
	}
	s := wantPhase(t, hub, PhaseAdded, 2)
	if s.Roots[0].Role != "signing" || s.Roots[1].Role != "next" {
		t.Fatalf("roles %+v", s.Roots)
	}
	added := sign(t, hub)
	if !verifies(t, added, oldRoot, clk.now()) {
		t.Fatal("after add, the old root no longer signs")
	}
	if _, err := op.DropRoot(ctx, "m1", true); err == nil || !strings.Contains(err.Error(), "switch first") {
		t.Fatalf("drop before switch: %v", err)
	}

	// 2: switch, not before the bundle had time to spread.
	if _, err := op.SwitchRoot(ctx, "m1", SwitchOptions{MinDistribution: time.Hour}); err == nil || !strings.Contains(err.Error(), "may not all hold it") {
		t.Fatalf("early switch: %v", err)
	}
	clk.add(time.Hour)
	if _, err := op.SwitchRoot(ctx, "m1", SwitchOptions{MinDistribution: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if msg, err := op.SwitchRoot(ctx, "m1", SwitchOptions{}); err != nil || !strings.Contains(msg, "already switched") {
		t.Fatalf("switch again: %q, %v", msg, err)
	}
	if _, err := op.AddRoot(ctx, "m1", nil); err == nil || !strings.Contains(err.Error(), "drop it first") {
		t.Fatalf("add while the previous root is trusted: %v", err)
	}
	if _, err := hub.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	s = wantPhase(t, hub, PhaseSwitched, 2)
	if s.PreviousValidUntil.IsZero() || s.Roots[1].Role != "previous" {
		t.Fatalf("status after switch: %+v", s)
	}
	newCert := sign(t, hub)
	if verifies(t, newCert, oldRoot, clk.now()) {
		t.Fatal("after switch, a new certificate still chains to the old root")
	}
	bundle := rootsOf(t, hub)
	for name, c := range map[string][]byte{"old": oldCert, "added": added, "new": newCert} {
		if !verifies(t, c, bundle, clk.now()) {
			t.Fatalf("after switch, the %s certificate does not verify against the bundle", name)
		}
	}

	// 3: drop, not while an old certificate may be valid.
	if _, err := op.DropRoot(ctx, "m1", false); err == nil || !strings.Contains(err.Error(), "may be valid until") {
		t.Fatalf("early drop: %v", err)
	}
	clk.add(DefaultMaxTTL)
	if _, err := op.DropRoot(ctx, "m1", false); err != nil {
		t.Fatal(err)
	}
	if msg, err := op.DropRoot(ctx, "m1", false); err != nil || !strings.Contains(msg, "no previous root") {
		t.Fatalf("drop again: %q, %v", msg, err)
	}
	if _, err := hub.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	wantPhase(t, hub, PhaseNone, 1)
	bundle = rootsOf(t, hub)
	now := start.Add(2 * time.Hour) // within both certificates' lifetimes: the old one is refused for its root, not its age
	if verifies(t, oldCert, bundle, now) {
		t.Fatal("after drop, a certificate of the old root still verifies")
	}
	if !verifies(t, newCert, bundle, now) {
		t.Fatal("after drop, a certificate of the new root does not verify")
	}

	// A restart loads the rotated CA.
	again := newAuthority(t, dir, Options{Now: clk.now}, mesh1)
	if !verifies(t, sign(t, again), bundle, clk.now()) {
		t.Fatal("after a restart the CA does not sign under the new root")
	}
}

// TestRotationToPluggedIn moves a generated root to an operator's
// intermediate (Istio's cacerts), then checks the plugged-in material is
// checked before anything is stored.
func TestRotationToPluggedIn(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a := newAuthority(t, dir, Options{}, mesh1)
	oldCert := sign(t, a)
	p := newPluggedCA(t)

	bad := p.files(t)
	bad[FileCAKey] = newTestCA(t, "other", nil).keyPEM(t)
	if _, err := a.AddRoot(ctx, "m1", bad); err == nil || !strings.Contains(err.Error(), "key does not match") {
		t.Fatalf("plugged-in CA with a wrong key: %v", err)
	}
	if _, err := a.AddRoot(ctx, "m1", map[string][]byte{"tls.crt": nil}); err == nil {
		t.Fatal("a blob that is not of Istio's cacerts was accepted")
	}
	wantPhase(t, a, PhaseNone, 1)

	if _, err := a.AddRoot(ctx, "m1", p.files(t)); err != nil {
		t.Fatal(err)
	}
	if msg, err := a.AddRoot(ctx, "m1", p.files(t)); err != nil || !strings.Contains(msg, "already added") {
		t.Fatalf("add the same cacerts again: %q, %v", msg, err)
	}
	if _, err := a.AddRoot(ctx, "m1", nil); err == nil || !strings.Contains(err.Error(), "another new CA") {
		t.Fatalf("add another: %v", err)
	}
	if _, err := a.SwitchRoot(ctx, "m1", SwitchOptions{Force: true, MinDistribution: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if got := a.meshes["m1"].source; got != sourcePlugged {
		t.Fatalf("source after switch %s, want %s", got, sourcePlugged)
	}
	newCert := sign(t, a)
	only := x509.NewCertPool()
	only.AddCert(p.root.cert)
	if !verifies(t, newCert, only, time.Now()) {
		t.Fatal("after switch, a new certificate does not chain to the operator's root")
	}
	if !verifies(t, oldCert, rootsOf(t, a), time.Now()) {
		t.Fatal("after switch, the old certificate does not verify against the bundle")
	}
	if _, err := a.DropRoot(ctx, "m1", true); err != nil {
		t.Fatal(err)
	}
	if verifies(t, oldCert, rootsOf(t, a), time.Now()) {
		t.Fatal("after drop, the old certificate verifies")
	}
	for _, n := range []string{FileRootKey, FilePrevRootCert, FileRotationAdded, FileRotationSwitched, NextPrefix + FileCACert} {
		if _, err := os.Stat(filepath.Join(dir, "m1", n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left in the store after the rotation: %v", n, err)
		}
	}
}

func TestDirStoreReplaceConflict(t *testing.T) {
	ctx := context.Background()
	s, err := NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, "m1", map[string][]byte{"a": []byte("1"), "b": []byte("2")}); err != nil {
		t.Fatal(err)
	}
	stale := map[string][]byte{"a": []byte("1")}
	if err := s.Replace(ctx, "m1", stale, map[string][]byte{"a": []byte("x")}); !errors.Is(err, ErrConflict) {
		t.Fatalf("replace of a stale read: %v, want ErrConflict", err)
	}
	cur, _ := s.Get(ctx, "m1")
	if err := s.Replace(ctx, "m1", cur, map[string][]byte{"a": []byte("x"), "c": []byte("3")}); err != nil {
		t.Fatal(err)
	}
	got, _ := s.Get(ctx, "m1")
	if !sameBlobs(got, map[string][]byte{"a": []byte("x"), "c": []byte("3")}) {
		t.Fatalf("after replace: %q", got)
	}
}

// TestRefreshEvery: a replica reading the store every interval reports a
// mesh whose CA changed (a root added by another) at the next tick, and
// nothing while nothing changed.
func TestRefreshEvery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		op := newAuthority(t, dir, Options{}, mesh1)
		hub := newAuthority(t, dir, Options{}, mesh1)
		ctx, cancel := context.WithCancel(t.Context())
		changed := make(chan string, 4)
		done := make(chan error, 1)
		go func() { done <- hub.RefreshEvery(ctx, time.Minute, func(m string) { changed <- m }) }()

		time.Sleep(time.Minute)
		synctest.Wait()
		select {
		case m := <-changed:
			t.Fatalf("mesh %s reported changed; nothing changed", m)
		default:
		}
		if _, err := op.AddRoot(ctx, "m1", nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		select {
		case m := <-changed:
			if m != "m1" {
				t.Errorf("changed %q, want m1", m)
			}
		default:
			t.Fatal("the added root was not reported at the next tick")
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("RefreshEvery ended with %v, want nil", err)
		}
	})
}

// TestRefreshKeepsCAOnBadStore: a store changed into something that does
// not load leaves the CA in use and says why.
func TestRefreshKeepsCAOnBadStore(t *testing.T) {
	dir := t.TempDir()
	a := newAuthority(t, dir, Options{}, mesh1)
	writeFiles(t, filepath.Join(dir, "m1"), map[string][]byte{FileRotationAdded: []byte("yesterday")})
	if _, err := a.Refresh(context.Background()); err == nil || !strings.Contains(err.Error(), FileRotationAdded) {
		t.Fatalf("refresh of a bad store: %v", err)
	}
	sign(t, a)
}

// FuzzRotationBlobs feeds arbitrary rotation blobs beside a valid root:
// they load or are refused with an error, never a panic, and a loaded CA
// always trusts its signing root.
func FuzzRotationBlobs(f *testing.F) {
	f.Add([]byte(""), []byte("2026-01-02T03:04:05Z\n"), []byte(""))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), []byte(""), []byte("2026-01-02T03:04:05Z"))
	f.Add([]byte("garbage"), []byte("not a time"), []byte("2026-13-02T03:04:05Z"))
	dir := f.TempDir()
	a := newAuthority(f, dir, Options{}, mesh1)
	base, err := a.store.Get(context.Background(), "m1")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, prev, added, switched []byte) {
		blobs := map[string][]byte{FileRootCert: base[FileRootCert], FileRootKey: base[FileRootKey]}
		for n, b := range map[string][]byte{FilePrevRootCert: prev, FileRotationAdded: added, FileRotationSwitched: switched} {
			if len(b) > 0 {
				blobs[n] = b
			}
		}
		c, err := a.buildCA(mesh1, blobs)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if len(c.rootCerts) == 0 || !c.rootCerts[0].Equal(c.path[len(c.path)-1]) {
			t.Fatal("a loaded CA does not trust its signing root first")
		}
	})
}
