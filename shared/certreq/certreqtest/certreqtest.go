// Package certreqtest makes certificate signing requests for tests of the
// code that parses and signs them (shared/certreq, the CA, the RAs). It is
// imported only by tests.
package certreqtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"net/url"
	"testing"
)

// Template is what a test CSR asks for.
type Template struct {
	URIs   []string
	DNS    []string
	IPs    []net.IP
	Emails []string
}

// ECKey returns a new ECDSA P-256 key.
func ECKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// New returns a PEM CSR for req signed by key.
func New(t testing.TB, key crypto.Signer, req Template) []byte {
	t.Helper()
	tmpl := &x509.CertificateRequest{DNSNames: req.DNS, IPAddresses: req.IPs, EmailAddresses: req.Emails,
		Subject: pkix.Name{CommonName: "ignored"}}
	for _, u := range req.URIs {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// For returns a PEM CSR for the URI SANs uris with a new P-256 key.
func For(t testing.TB, uris ...string) []byte {
	t.Helper()
	return New(t, ECKey(t), Template{URIs: uris})
}
