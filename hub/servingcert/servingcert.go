// Package servingcert keeps the hub's TLS serving certificate. It is issued by
// the hub's own serving CA — a hub/ca Authority of one mesh, "hub", kept in
// <state dir>/serving-ca and separate from every tenant's CA, so that no
// tenant's CA can impersonate the hub — for the names the hub is dialled by,
// with that CA in its chain so that a spoke can pin it at first contact
// (docs/enrollment.md). It is renewed when it is due, on the handshake that
// finds it so.
package servingcert

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"time"

	"github.com/navemesh/nave/hub/ca"
)

// Mesh names the serving CA inside its store; TrustDomain and the identity
// below are the hub's own SPIFFE ID, never a tenant's.
const (
	Mesh           = "hub"
	TrustDomain    = "hub.nave.internal"
	subdir         = "serving-ca"
	namespace      = "nave-system"
	serviceAccount = "nave-hub"
	ttl            = 7 * 24 * time.Hour
)

// RootPath is where the serving CA's certificate is, under the hub's state
// dir: what `navectl ca-hash` pins and a spoke's hub.caFile names.
func RootPath(stateDir string) string {
	return filepath.Join(stateDir, subdir, Mesh, ca.FileRootCert)
}

// Cert is the hub's serving certificate. It is safe for concurrent use.
type Cert struct {
	auth  *ca.Authority
	hosts []string
	// sign is what every renewal asks for: the hub's identity, hosts as
	// DNS and IP SANs.
	sign ca.SignOptions
	log  *slog.Logger

	mu      sync.Mutex
	current *tls.Certificate
	renewAt time.Time
}

// New loads (or, on first start, generates) the serving CA under stateDir
// and issues a certificate for hosts (DNS names and IP addresses).
func New(ctx context.Context, stateDir string, hosts []string, log *slog.Logger) (*Cert, error) {
	store, err := ca.NewDirStore(filepath.Join(stateDir, subdir))
	if err != nil {
		return nil, fmt.Errorf("serving CA: %w", err)
	}
	auth, err := ca.New(store, ca.Options{MaxTTL: ttl, Logger: log})
	if err != nil {
		return nil, err
	}
	if err := auth.Load(ctx, ca.Mesh{Name: Mesh, TrustDomain: TrustDomain}); err != nil {
		return nil, fmt.Errorf("serving CA: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	id, err := ca.WorkloadID(TrustDomain, namespace, serviceAccount)
	if err != nil {
		return nil, err
	}
	c := &Cert{auth: auth, hosts: hosts, log: log, sign: ca.SignOptions{Identities: []ca.ID{id}, TTL: ttl}}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			c.sign.IPAddresses = append(c.sign.IPAddresses, ip)
		} else {
			c.sign.DNSNames = append(c.sign.DNSNames, h)
		}
	}
	if err := c.renew(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// RootsPEM is the serving CA's certificate(s), PEM.
func (c *Cert) RootsPEM() ([]byte, error) { return c.auth.RootsPEM(Mesh) }

// GetCertificate implements tls.Config.GetCertificate: the current
// certificate, renewed first if it is due. A failed renewal is logged and
// the current certificate served until it expires.
func (c *Cert) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// One handshake renews (a mint, under a millisecond, once a week);
	// the ones arriving meanwhile wait for it rather than mint too.
	if time.Now().After(c.renewAt) {
		if err := c.renew(context.Background()); err != nil {
			c.renewAt = time.Now().Add(retryRenewal)
			c.log.Error("serving certificate renewal failed; serving the current one", "retry_in", retryRenewal, "err", err)
		}
	}
	return c.current, nil
}

// retryRenewal is how long after a failed renewal the next is tried.
const retryRenewal = time.Minute

// ServerConfig is a TLS configuration serving the certificate: TLS 1.2 or
// later, asking for (not requiring) a client certificate, which the
// services verify themselves against the caller's own mesh's roots.
func (c *Cert) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: c.GetCertificate,
		ClientAuth:     tls.RequestClientCert,
	}
}

// renew mints a new certificate (c.mu held).
func (c *Cert) renew(ctx context.Context) error {
	m, err := c.auth.Mint(ctx, Mesh, c.sign)
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	cert, err := tls.X509KeyPair(m.ChainPEM, m.KeyPEM)
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	c.current, c.renewAt = &cert, ca.RenewAt(cert.Leaf)
	c.log.Info("serving certificate issued", "hosts", c.hosts, "not_after", cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	return nil
}
