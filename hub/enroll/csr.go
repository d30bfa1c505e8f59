package enroll

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	"github.com/navemesh/nave/shared/certreq"
	"github.com/navemesh/nave/shared/spiffeid"
)

// errBadCSR wraps every refusal of a certificate request.
var errBadCSR = errors.New("bad certificate request")

// parseCSR checks a PEM certificate request with the CA's own rules
// (certreq.Parse: one CERTIFICATE REQUEST block and nothing else, a valid
// self-signature, a key the CA issues for), as errBadCSR.
func parseCSR(csrPEM []byte) (*x509.CertificateRequest, error) {
	csr, err := certreq.Parse(csrPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errBadCSR, err)
	}
	return csr, nil
}

// checkIssued checks what the Signer returned before it reaches a spoke:
// a chain whose leaf has exactly the cluster's SPIFFE ID, the request's
// key, and verifies for client authentication against the mesh's roots.
func checkIssued(chainPEM []byte, csr *x509.CertificateRequest, roots *x509.CertPool, td, cluster string, now time.Time) (*x509.Certificate, error) {
	certs, err := parseChain(chainPEM)
	if err != nil {
		return nil, err
	}
	leaf := certs[0]
	gotTD, gotCluster, err := spiffeid.FromCertificate(leaf)
	if err != nil {
		return nil, err
	}
	if gotTD != td || gotCluster != cluster {
		return nil, fmt.Errorf("issued for %s/%s, want %s/%s", gotTD, gotCluster, td, cluster)
	}
	type equaler interface{ Equal(x crypto.PublicKey) bool }
	if k, ok := leaf.PublicKey.(equaler); !ok || !k.Equal(csr.PublicKey) {
		return nil, errors.New("issued certificate does not hold the request's key")
	}
	if _, err := verifyClient(certs, roots, now); err != nil {
		return nil, err
	}
	return leaf, nil
}

// parseChain parses PEM certificates, leaf first.
func parseChain(chainPEM []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for rest := chainPEM; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate chain: %w", err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("certificate chain: no certificate")
	}
	return certs, nil
}

// verifyClient verifies certs (leaf first, then intermediates) as a client
// certificate chain against roots only.
func verifyClient(certs []*x509.Certificate, roots *x509.CertPool, now time.Time) ([][]*x509.Certificate, error) {
	if roots == nil {
		return nil, errors.New("no roots of trust")
	}
	leaf := certs[0]
	if leaf.IsCA {
		return nil, errors.New("certificate is a CA certificate, not a client certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	return leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
}
