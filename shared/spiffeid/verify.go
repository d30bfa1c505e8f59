package spiffeid

import (
	"crypto/x509"
	"fmt"
)

// VerifyChain verifies a TLS peer's certificate chain (DER, leaf first, as
// tls.Config.VerifyPeerCertificate receives it) against roots for usage,
// and checks that the leaf carries exactly one URI SAN, want. It is for
// peers known by SPIFFE ID rather than DNS name (a spoke's registration
// authority, a workload): use it with InsecureSkipVerify, which only turns
// off crypto/tls's own name check.
func VerifyChain(raw [][]byte, roots *x509.CertPool, usage x509.ExtKeyUsage, want ID) (*x509.Certificate, error) {
	if len(raw) == 0 {
		return nil, fmt.Errorf("the peer presented no certificate")
	}
	certs := make([]*x509.Certificate, len(raw))
	for i, r := range raw {
		c, err := x509.ParseCertificate(r)
		if err != nil {
			return nil, fmt.Errorf("certificate %d of the peer's chain: %w", i, err)
		}
		certs[i] = c
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return nil, err
	}
	if len(certs[0].URIs) != 1 || certs[0].URIs[0].String() != want.String() {
		return nil, fmt.Errorf("the peer is %v, want %s", certs[0].URIs, want)
	}
	return certs[0], nil
}
