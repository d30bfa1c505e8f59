package ca

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/navemesh/nave/shared/certreq"
	"github.com/navemesh/nave/shared/certreq/certreqtest"
)

var (
	mesh1 = Mesh{Name: "m1", TrustDomain: "m1.example"}
	mesh2 = Mesh{Name: "m2", TrustDomain: "m2.example"}
)

// newAuthority returns an Authority on a DirStore in dir with meshes
// loaded.
func newAuthority(t testing.TB, dir string, opts Options, meshes ...Mesh) *Authority {
	t.Helper()
	store, err := NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(store, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range meshes {
		if err := a.Load(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

const uriA = "spiffe://m1.example/ns/a/sa/b"

func mustID(t testing.TB, s string) ID {
	t.Helper()
	id, err := ParseID(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// parseChain parses a PEM chain, failing the test on anything but
// certificates.
func parseChain(t testing.TB, chainPEM []byte) []*x509.Certificate {
	t.Helper()
	certs, err := parseCertsPEM(chainPEM)
	if err != nil {
		t.Fatal(err)
	}
	return certs
}

// verifyLeaf verifies chain[0] against roots with chain[1:] as
// intermediates, for any usage, and returns the verified path.
func verifyLeaf(t testing.TB, chain []*x509.Certificate, roots *x509.CertPool, at time.Time) []*x509.Certificate {
	t.Helper()
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	paths, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: at,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	if err != nil {
		t.Fatalf("chain does not verify: %v", err)
	}
	return paths[0]
}

// testCA is a CA made by a test, for plugged-in CAs and foreign
// certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func (c *testCA) pem() []byte { return encodeCertPEM(c.cert.Raw) }

func (c *testCA) keyPEM(t testing.TB) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(c.key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

func nextSerial() *big.Int {
	n, err := randomSerial()
	if err != nil {
		panic(err)
	}
	return n
}

// newTestCA returns a CA certificate named cn, self-signed when parent is
// nil, else signed by parent.
func newTestCA(t testing.TB, cn string, parent *testCA) *testCA {
	t.Helper()
	key := certreqtest.ECKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          nextSerial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	issuer, signer := tmpl, key
	if parent != nil {
		issuer, signer = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, key.Public(), signer)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key}
}

// leaf issues a leaf certificate for key with the given template fields
// filled in.
func (c *testCA) leaf(t testing.TB, key crypto.Signer, tmpl *x509.Certificate) *x509.Certificate {
	t.Helper()
	tmpl.SerialNumber = nextSerial()
	if tmpl.NotBefore.IsZero() {
		tmpl.NotBefore = time.Now().Add(-time.Hour)
		tmpl.NotAfter = time.Now().Add(time.Hour)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, key.Public(), c.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// writeFiles writes name → content into dir (created 0700).
func writeFiles(t testing.TB, dir string, files map[string][]byte) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func concat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// wantRefusal asserts that err is a certreq.RefusalError of reason whose message
// contains every one of parts.
func wantRefusal(t testing.TB, err error, reason certreq.Reason, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want a %s refusal", reason)
	}
	got, ok := certreq.ReasonOf(err)
	if !ok {
		t.Fatalf("error %q is not a refusal, want reason %s", err, reason)
	}
	if got != reason {
		t.Errorf("reason %s, want %s (error: %v)", got, reason, err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not say %q", err, p)
		}
	}
}

// wantErrorSays asserts that err is not nil and contains every part.
func wantErrorSays(t testing.TB, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one saying %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not say %q", err, p)
		}
	}
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
