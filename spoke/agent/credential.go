package agent

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	cryptorand "crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"math/rand/v2"
	"net/url"
	"time"

	"github.com/navemesh/nave/shared/renewal"
	"github.com/navemesh/nave/shared/spiffeid"
)

// Credential is a workload certificate with its key and the mesh roots it
// chains to. It is immutable once made: share it freely.
type Credential struct {
	ChainPEM, KeyPEM, RootsPEM []byte
	Leaf                       *x509.Certificate
	// Received is when the agent got it.
	Received time.Time
}

// Serial names the certificate (the SDS version).
func (c *Credential) Serial() string { return c.Leaf.SerialNumber.Text(16) }

// newKey generates a workload key and a CSR for id signed with it.
func newKey(id spiffeid.ID) (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), cryptorand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate the workload key: %w", err)
	}
	u, err := url.Parse(id.String())
	if err != nil {
		return nil, nil, fmt.Errorf("workload identity %s: %w", id, err)
	}
	der, err := x509.CreateCertificateRequest(cryptorand.Reader, &x509.CertificateRequest{URIs: []*url.URL{u}}, key)
	if err != nil {
		return nil, nil, fmt.Errorf("create the CSR: %w", err)
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// newCredential checks an issued chain against the key it was asked for,
// the identity and the mesh roots, and makes the credential.
func newCredential(chainPEM []byte, key *ecdsa.PrivateKey, id spiffeid.ID, roots *x509.CertPool, rootsPEM []byte, now time.Time) (*Credential, error) {
	var certs []*x509.Certificate
	for rest := chainPEM; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d of the issued chain: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("the issued chain holds no certificate")
	}
	leaf := certs[0]
	pub, ok := leaf.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(&key.PublicKey) {
		return nil, fmt.Errorf("the issued certificate is not for the key the agent generated")
	}
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != id.String() {
		return nil, fmt.Errorf("the issued certificate is for %v, want %s", leaf.URIs, id)
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, fmt.Errorf("the issued certificate does not verify against the mesh roots: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode the workload key: %w", err)
	}
	return &Credential{ChainPEM: chainPEM, KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		RootsPEM: rootsPEM, Leaf: leaf, Received: now}, nil
}

// RenewAt is when to start renewing c under p. Its lifetime counts from
// the later of NotBefore and when it was received (a CA backdates
// NotBefore to allow for clock skew); one received expired is due at once.
func RenewAt(c *Credential, p renewal.Policy) time.Time {
	start := c.Leaf.NotBefore
	if c.Received.After(start) {
		start = c.Received
	}
	return p.At(start, c.Leaf.NotAfter)
}

// jitterSource is the random source of renewal times.
func jitterSource() float64 { return rand.Float64() }
