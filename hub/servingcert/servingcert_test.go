package servingcert

import (
	"bytes"
	"context"
	"crypto/x509"
	"os"
	"testing"
)

func TestServingCertificate(t *testing.T) {
	dir := t.TempDir()
	c, err := New(context.Background(), dir, []string{"localhost", "127.0.0.1", "hub.example.com"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := c.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	// The chain carries the serving CA, so a spoke can pin it.
	if len(cert.Certificate) != 2 {
		t.Fatalf("chain of %d certificates, want leaf and serving CA", len(cert.Certificate))
	}
	rootPEM, err := os.ReadFile(RootPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(rootPEM)
	for _, name := range []string{"localhost", "127.0.0.1", "hub.example.com"} {
		if _, err := cert.Leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			t.Errorf("serving certificate for %s: %v", name, err)
		}
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{DNSName: "evil.example.com", Roots: roots}); err == nil {
		t.Error("serving certificate valid for a name not in hosts")
	}
	// A restart keeps the serving CA (what spokes pinned).
	again, err := New(context.Background(), dir, []string{"localhost"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p1, _ := c.RootsPEM()
	p2, _ := again.RootsPEM()
	if !bytes.Equal(p1, p2) || !bytes.Equal(p1, rootPEM) {
		t.Error("the serving CA changed across a restart")
	}
}
