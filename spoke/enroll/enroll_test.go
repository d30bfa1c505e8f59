package enroll_test

import (
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/navemesh/nave/internal/x509test"
	"github.com/navemesh/nave/spoke/enroll"
)

// Enrolling and renewing against a real hub are tested in e2e/integration.

func TestCAHashIsOfThePublicKey(t *testing.T) {
	a := x509test.NewAuthority("x")
	h := enroll.CAHash(a.Cert)
	if !strings.HasPrefix(h, "sha256:") || len(h) != len("sha256:")+64 {
		t.Fatalf("CAHash = %q", h)
	}
	if h == enroll.CAHash(x509test.NewAuthority("x").Cert) {
		t.Fatal("two keys, one hash")
	}
	var c x509.Certificate = *a.Cert
	c.Raw = nil // another encoding of the same key hashes the same
	if enroll.CAHash(&c) != h {
		t.Fatal("the hash depends on more than the public key")
	}
}

func TestLoadTellsNotEnrolledFromBroken(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spoke")
	if _, err := enroll.Load(dir); !errors.Is(err, enroll.ErrNotEnrolled) {
		t.Errorf("Load of a missing dir: %v, want ErrNotEnrolled", err)
	}
	// An enrollment that stopped before the credentials were written.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "identity.json"), []byte(`{"mesh":"acme","cluster":"east"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := enroll.Load(dir); !errors.Is(err, enroll.ErrNotEnrolled) {
		t.Errorf("Load without credentials.pem: %v, want ErrNotEnrolled", err)
	}
	// Credentials that cannot be used are not "not enrolled".
	if err := os.WriteFile(filepath.Join(dir, "credentials.pem"), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := enroll.Load(dir); err == nil || errors.Is(err, enroll.ErrNotEnrolled) {
		t.Errorf("Load of broken credentials: %v, want an error other than ErrNotEnrolled", err)
	}
}
