package webhookcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"time"

	"github.com/navemesh/nave/shared/renewal"
)

// serving is a serving certificate and the CA that signed it. Immutable.
type serving struct {
	tls    tls.Certificate
	cert   *x509.Certificate
	caGen  int
	caCert *x509.Certificate
}

// renewalPolicy renews a serving certificate half way through its
// validity, without jitter: the CA rotation (plan.go) is arithmetic on
// half-way points.
var renewalPolicy = renewal.Policy{Fraction: 0.5}

// renewAt is half way through the certificate's validity.
func (s *serving) renewAt() time.Time { return renewalPolicy.At(s.cert.NotBefore, s.cert.NotAfter) }

// issue signs a new key's certificate for hosts (DNS names or IP
// addresses) with ca, valid for validity from now but not beyond ca.
func issue(ca *authority, hosts []string, validity time.Duration, now time.Time) (*serving, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{Organization: []string{"nave"}, CommonName: hosts[0]},
		NotBefore:    now.Add(-backdate(validity)),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if tmpl.NotAfter.After(ca.cert.NotAfter) {
		tmpl.NotAfter = ca.cert.NotAfter
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &serving{
		tls:    tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert},
		cert:   cert,
		caGen:  ca.gen,
		caCert: ca.cert,
	}, nil
}
