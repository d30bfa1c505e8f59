// Package x509test makes small X.509 authorities and the certificates they
// issue, for tests of code on either side that verifies, pins or presents
// certificates. It is imported only by tests and test fixtures.
package x509test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"sync"
	"time"
)

// Authority is a self-signed root that issues certificates. It is safe for
// concurrent use.
type Authority struct {
	Cert *x509.Certificate
	key  crypto.Signer
	mu   sync.Mutex
}

// NewAuthority returns a fresh ECDSA P-256 root named name.
func NewAuthority(name string) *Authority {
	key := mustKey()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		panic(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		panic(err)
	}
	return &Authority{Cert: cert, key: key}
}

// Pool is a pool holding only this root.
func (a *Authority) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(a.Cert)
	return p
}

// PEM is the root certificate, PEM-encoded.
func (a *Authority) PEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.Cert.Raw})
}

// Issue signs tmpl for pub (serial and validity filled in when unset) and
// returns the certificate.
func (a *Authority) Issue(tmpl *x509.Certificate, pub crypto.PublicKey) *x509.Certificate {
	if tmpl.SerialNumber == nil {
		tmpl.SerialNumber = serial()
	}
	if tmpl.NotBefore.IsZero() {
		tmpl.NotBefore = time.Now().Add(-time.Minute)
	}
	if tmpl.NotAfter.IsZero() {
		tmpl.NotAfter = time.Now().Add(time.Hour)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.Cert, pub, a.key)
	if err != nil {
		panic(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		panic(err)
	}
	return cert
}

// ClientCert issues a client certificate with the given URI SANs, valid
// for ttl, for a fresh key.
func (a *Authority) ClientCert(ttl time.Duration, uris ...*url.URL) tls.Certificate {
	key := mustKey()
	cert := a.Issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "client"},
		NotAfter:    time.Now().Add(ttl),
		URIs:        uris,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, key.Public())
	return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}
}

// ServerCert issues a serving certificate for dnsName and 127.0.0.1; its
// chain includes this root, so that a client can pin the root.
func (a *Authority) ServerCert(dnsName string) tls.Certificate {
	key := mustKey()
	cert := a.Issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: dnsName},
		NotAfter:    time.Now().Add(24 * time.Hour),
		DNSNames:    []string{dnsName},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, key.Public())
	return tls.Certificate{Certificate: [][]byte{cert.Raw, a.Cert.Raw}, PrivateKey: key, Leaf: cert}
}

func mustKey() *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	return k
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err)
	}
	return n
}
