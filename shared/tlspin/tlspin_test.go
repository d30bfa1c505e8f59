package tlspin_test

import (
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"

	"github.com/navemesh/nave/internal/x509test"
	"github.com/navemesh/nave/shared/tlspin"
)

func TestVerify(t *testing.T) {
	ca := x509test.NewAuthority("hub")
	other := x509test.NewAuthority("other")
	serving := ca.ServerCert("hub.example")
	chain := []*x509.Certificate{serving.Leaf, ca.Cert}
	pin := tlspin.Hash(ca.Cert)

	got, err := tlspin.Verify(chain, "hub.example", pin)
	if err != nil || !got.Equal(ca.Cert) {
		t.Fatalf("Verify = %v, %v; want the pinned CA", got, err)
	}
	if _, err := tlspin.Verify(chain, "127.0.0.1", pin); err != nil {
		t.Errorf("by IP address: %v", err)
	}
	if _, err := tlspin.Verify(chain, "other.example", pin); err == nil {
		t.Error("a certificate for another name verified")
	}
	if _, err := tlspin.Verify(chain, "hub.example", tlspin.Hash(other.Cert)); err == nil || !strings.Contains(err.Error(), "matches") {
		t.Errorf("another CA's pin: %v", err)
	}
	// A chain that claims the pinned CA but was signed by another.
	forged := other.ServerCert("hub.example")
	if _, err := tlspin.Verify([]*x509.Certificate{forged.Leaf, ca.Cert}, "hub.example", pin); err == nil {
		t.Error("a leaf of another CA verified next to the pinned CA")
	}
	if _, err := tlspin.Verify(nil, "hub.example", pin); err == nil {
		t.Error("an empty chain verified")
	}
}

func TestParse(t *testing.T) {
	pin := tlspin.Hash(x509test.NewAuthority("x").Cert)
	if got, err := tlspin.Parse(strings.ToUpper(pin)); err != nil || got != pin {
		t.Errorf("Parse(upper case) = %q, %v", got, err)
	}
	for _, bad := range []string{"", "sha256:", "sha256:abc", "md5:" + pin[7:], pin[7:], pin + "00"} {
		if _, err := tlspin.Parse(bad); err == nil {
			t.Errorf("Parse(%q) succeeded", bad)
		}
	}
}

func TestHashesPEM(t *testing.T) {
	ca := x509test.NewAuthority("hub")
	leaf := ca.ServerCert("hub.example").Leaf
	bundle := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw}), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})...)
	got, err := tlspin.HashesPEM(bundle)
	if err != nil || len(got) != 1 || got[0] != tlspin.Hash(ca.Cert) {
		t.Errorf("HashesPEM = %v, %v; want the CA's pin only", got, err)
	}
	if _, err := tlspin.HashesPEM(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("junk")})); err == nil {
		t.Error("a garbled certificate was accepted")
	}
}
