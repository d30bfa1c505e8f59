// Package enrolltest holds what tests of enrollment share: a per-mesh CA
// that satisfies enroll.Signer, and a hub fixture (the Enrollment service
// and ingest behind a real gRPC server with TLS on 127.0.0.1). It is for
// tests only: the hub's own, navectl's, and the cross-side integration
// tests in e2e.
package enrolltest

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/navemesh/nave/hub/enroll"
	"github.com/navemesh/nave/internal/x509test"
	"github.com/navemesh/nave/shared/spiffeid"
)

// CA is an enroll.Signer with one Authority and trust domain per mesh. It
// is safe for concurrent use.
type CA struct {
	mu     sync.Mutex
	meshes map[string]caMesh
	// Tamper, if set, may change every certificate template SignCluster
	// is about to sign (a misbehaving CA, for tests of what the hub
	// checks). Set it before the CA is used.
	Tamper func(*x509.Certificate)
}

type caMesh struct {
	td   string
	auth *x509test.Authority
}

var (
	_ enroll.Signer       = (*CA)(nil)
	_ enroll.TrustBundler = (*CA)(nil)
)

// NewCA returns a CA with no meshes.
func NewCA() *CA { return &CA{meshes: map[string]caMesh{}} }

// AddMesh gives mesh its own root and trust domain td, and returns the root.
func (c *CA) AddMesh(mesh, td string) *x509test.Authority {
	a := x509test.NewAuthority("nave mesh " + mesh)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.meshes[mesh] = caMesh{td: td, auth: a}
	return a
}

// Authority is mesh's root.
func (c *CA) Authority(mesh string) *x509test.Authority {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.meshes[mesh].auth
}

func (c *CA) mesh(mesh string) (caMesh, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.meshes[mesh]
	if !ok {
		return caMesh{}, fmt.Errorf("mesh %q has no CA", mesh)
	}
	return m, nil
}

// SignCluster implements enroll.Signer.
func (c *CA) SignCluster(_ context.Context, mesh, cluster string, csrPEM []byte, ttl time.Duration) ([]byte, error) {
	m, err := c.mesh(mesh)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(csrPEM)
	if block == nil {
		return nil, errors.New("no PEM certificate request")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, err
	}
	id, err := spiffeid.Cluster(m.td, cluster)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		Subject:   pkix.Name{CommonName: cluster},
		NotBefore: time.Now(),
		NotAfter:  time.Now().Add(ttl),
		URIs:      []*url.URL{id},
		// The request's names, as hub/ca carries them (its fallback
		// server's); limits are hub/ca's business.
		DNSNames:    csr.DNSNames,
		IPAddresses: csr.IPAddresses,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		// Server and client authentication, as hub/ca's cluster
		// certificates (a spoke in fallback serves with it).
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if c.Tamper != nil {
		c.Tamper(tmpl)
	}
	cert := m.auth.Issue(tmpl, csr.PublicKey)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), nil
}

// Roots implements enroll.Signer.
func (c *CA) Roots(mesh string) (*x509.CertPool, error) {
	m, err := c.mesh(mesh)
	if err != nil {
		return nil, err
	}
	return m.auth.Pool(), nil
}

// TrustDomain implements enroll.Signer.
func (c *CA) TrustDomain(mesh string) (string, error) {
	m, err := c.mesh(mesh)
	if err != nil {
		return "", err
	}
	return m.td, nil
}

// TrustBundlePEM implements enroll.TrustBundler.
func (c *CA) TrustBundlePEM(mesh string) ([]byte, error) {
	m, err := c.mesh(mesh)
	if err != nil {
		return nil, err
	}
	return m.auth.PEM(), nil
}
