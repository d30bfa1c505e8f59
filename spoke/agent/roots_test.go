package agent

import (
	"bytes"
	"context"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/navemesh/nave/internal/x509test"
)

// TestRAClientFollowsTheBundle walks a root rotation as the RA answers
// it: the client trusts the bundle each answer carries, so a certificate
// of the new root is accepted by an agent started with the old root only,
// and the old root is forgotten once the bundle drops it. A bundle that
// does not vouch for the certificate issued with it is refused and changes
// nothing.
func TestRAClientFollowsTheBundle(t *testing.T) {
	oldCA, newCA := x509test.NewAuthority("old root"), x509test.NewAuthority("new root")
	ra := &fakeRA{ca: oldCA}
	addr := startRA(t, ra, testRA)
	c := dialTestRA(t, addr, oldCA, testRA, writeToken(t))
	ctx := context.Background()
	both := append(append([]byte{}, oldCA.PEM()...), newCA.PEM()...)
	verifies := func(cred *Credential, ca *x509test.Authority) bool {
		_, err := cred.Leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		return err == nil
	}

	// 1: the old root signs, the bundle holds both.
	ra.rotate(oldCA, oldCA.PEM(), newCA.PEM())
	cred, err := c.Request(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(cred.RootsPEM, both) || !bytes.Equal(c.RootsPEM(), both) {
		t.Fatalf("after add, roots handed out %d bytes, trusted %d; want both roots (%d bytes)", len(cred.RootsPEM), len(c.RootsPEM()), len(both))
	}
	if strings.Count(string(cred.ChainPEM), "BEGIN CERTIFICATE") != 1 {
		t.Errorf("the chain holds the bundle: %d certificates", strings.Count(string(cred.ChainPEM), "BEGIN CERTIFICATE"))
	}

	// 2: the new root signs.
	ra.rotate(newCA, oldCA.PEM(), newCA.PEM())
	if cred, err = c.Request(ctx); err != nil {
		t.Fatalf("after switch: %v", err)
	}
	if !verifies(cred, newCA) {
		t.Fatal("after switch, the certificate does not chain to the new root")
	}

	// A bundle that does not hold the signer of the answer's certificate,
	// or that is not roots, is refused; the trust stays.
	ra.rotate(newCA, oldCA.PEM())
	if _, err := c.Request(ctx); err == nil || !strings.Contains(err.Error(), "does not verify against the mesh roots") {
		t.Fatalf("a certificate outside its bundle: %v", err)
	}
	ra.rotate(newCA, []byte("garbage"))
	if _, err := c.Request(ctx); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("a garbage bundle: %v", err)
	}
	if !bytes.Equal(c.RootsPEM(), both) {
		t.Fatal("a refused answer changed the roots trusted")
	}

	// 3: the old root is dropped.
	ra.rotate(newCA, newCA.PEM())
	if cred, err = c.Request(ctx); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(cred.RootsPEM, newCA.PEM()) || !bytes.Equal(c.RootsPEM(), newCA.PEM()) {
		t.Fatal("after drop, the old root is still trusted")
	}
}

// FuzzParseBundle: any input gives a bundle of CA certificates or an
// error, never a panic.
func FuzzParseBundle(f *testing.F) {
	ca := x509test.NewAuthority("root")
	f.Add(string(ca.PEM()))
	f.Add(string(ca.PEM()) + "junk between\n" + string(ca.PEM()))
	f.Add("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		b, err := parseBundle(s)
		if err != nil {
			return
		}
		if len(b.pem) == 0 || !strings.Contains(string(b.pem), "BEGIN CERTIFICATE") {
			t.Fatalf("a bundle without certificates: %q", b.pem)
		}
	})
}

// writeToken writes a service-account token file and returns its path.
func writeToken(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte("token"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestKeeperRefreshesRoots: with RootsRefresh a certificate far from its
// renewal is replaced anyway, so that a new bundle reaches the workload.
func TestKeeperRefreshesRoots(t *testing.T) {
	ca := x509test.NewAuthority("mesh")
	published := make(chan *Credential, 16)
	req := RequesterFunc(func(context.Context) (*Credential, error) { return makeCredential(ca, 24*time.Hour) })
	k := NewKeeper(req, KeeperOptions{RenewFraction: 0.5, RetryInitial: time.Second, RetryMax: time.Second, Timeout: 5 * time.Second,
		RootsRefresh: 100 * time.Millisecond, Publish: func(c *Credential) error {
			select {
			case published <- c:
			default:
			}
			return nil
		}}, discard(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	deadline := time.After(30 * time.Second)
	for i := range 3 {
		select {
		case <-published:
		case <-deadline:
			t.Fatalf("%d credentials published in 30s; want 3 with a 24h certificate and RootsRefresh 100ms", i)
		}
	}
	if _, at, _ := k.Current(); time.Until(at) > time.Second {
		t.Errorf("next request at %s, want within RootsRefresh", at)
	}
}
