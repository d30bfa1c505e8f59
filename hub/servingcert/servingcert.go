// Package servingcert keeps the hub's TLS serving certificate. It is issued by
// the hub's own serving CA — a hub/ca Authority of one mesh, "hub", kept in
// <state dir>/serving-ca/hub/ or, with state.store=kubernetes, in Secret
// nave-serving-ca-hub, apart from every tenant's CA (nave-ca-<mesh>), so
// that no tenant's CA can impersonate the hub — for the names the hub is
// dialled by, with that CA in its chain so that a spoke can pin it at first
// contact (docs/enrollment.md). Replicas racing to create it end with one
// (the store's create-if-absent). The certificate is renewed when it is due,
// on the handshake that finds it so.
package servingcert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"time"

	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/shared/tlsconfig"
)

// Mesh names the serving CA inside its store; TrustDomain and the identity
// below are the hub's own SPIFFE ID, never a tenant's.
const (
	Mesh        = "hub"
	TrustDomain = "hub.nave.internal"
	subdir      = "serving-ca"
	// SecretPrefix starts the name of the serving CA's Secret:
	// nave-serving-ca-hub. A tenant's CA Secret starts with ca.SecretPrefix,
	// so no mesh name reaches it.
	SecretPrefix   = "nave-serving-ca-"
	namespace      = "nave-system"
	serviceAccount = "nave-hub"
	ttl            = 7 * 24 * time.Hour
)

// RootPath is where the serving CA's certificate is, under the hub's state
// dir (state.store=dir): what `navectl ca-hash` pins and a spoke's
// hub.caFile names.
func RootPath(stateDir string) string {
	return filepath.Join(stateDir, subdir, Mesh, ca.FileRootCert)
}

// OpenStore opens the store of the serving CA of kind (the hub's
// state.store): ca.StoreDir, <stateDir>/serving-ca, or ca.StoreKubernetes,
// Secret nave-serving-ca-hub in namespace through the kubeconfig at
// kubeconfigPath (empty: in-cluster, else $KUBECONFIG).
func OpenStore(kind, stateDir, namespace, kubeconfigPath string) (ca.LocatedStore, error) {
	switch kind {
	case ca.StoreDir:
		store, err := ca.NewDirStore(filepath.Join(stateDir, subdir))
		if err != nil {
			return nil, fmt.Errorf("serving CA: %w", err)
		}
		return store, nil
	case ca.StoreKubernetes:
		client, err := ca.OpenSecretClient(kubeconfigPath)
		if err != nil {
			return nil, fmt.Errorf("serving CA: %w", err)
		}
		return ca.NewSecretStore(client, namespace, ca.WithSecretPrefix(SecretPrefix)), nil
	}
	return nil, fmt.Errorf("serving CA store %q: want %s or %s", kind, ca.StoreDir, ca.StoreKubernetes)
}

// RootPEM reads the serving CA's certificate from store (OpenStore's)
// without creating it: what `navectl ca-hash` pins.
func RootPEM(ctx context.Context, store ca.LocatedStore) ([]byte, error) {
	blobs, err := store.Get(ctx, Mesh)
	if err != nil {
		return nil, fmt.Errorf("serving CA: %w", err)
	}
	b, ok := blobs[ca.FileRootCert]
	if !ok {
		return nil, fmt.Errorf("serving CA: %s holds no %s: the hub creates it when it first starts", store.Location(Mesh), ca.FileRootCert)
	}
	return b, nil
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

// New loads (or, on first start, generates) the serving CA from store
// (OpenStore's) and issues a certificate for hosts (DNS names and IP
// addresses).
func New(ctx context.Context, store ca.Store, hosts []string, log *slog.Logger) (*Cert, error) {
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

// ClientConfig is the TLS configuration the hub dials a polled spoke with
// (hub/poll): it presents the serving certificate (spiffeid.Hub, usable
// for client authentication), which the spoke requires, and only requires
// a certificate of the server — the caller verifies the spoke's cluster
// certificate with the spoke authenticator, by SPIFFE ID, not by name.
func (c *Cert) ClientConfig() *tls.Config {
	return tlsconfig.VerifyingClient(func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("the polled spoke presented no certificate")
		}
		return nil // verified by the spoke authenticator, after the handshake
	}, c.present)
}

// ServerConfig is a TLS configuration serving the certificate to any
// client, foreign ones included (TLS 1.2 or later: Envoy, browsers),
// asking for (not requiring) a client certificate, which the services
// verify themselves against the caller's own mesh's roots.
func (c *Cert) ServerConfig() *tls.Config {
	return tlsconfig.MutualServer(tlsconfig.Foreign, c.present, tls.RequestClientCert, nil)
}

// present is GetCertificate for tlsconfig.
func (c *Cert) present() (*tls.Certificate, error) { return c.GetCertificate(nil) }

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

// ReplicaID is the SPIFFE ID of hub replica id in the serving CA's trust
// domain, spiffe://hub.nave.internal/nave/replica/<id>: the identity
// replicas present to each other on the relay (hub/replica).
func ReplicaID(id string) (ca.ID, error) {
	return ca.ParseID("spiffe://" + TrustDomain + "/nave/replica/" + id)
}

// MintReplica issues hub replica id's certificate (ReplicaID, usable as a
// client and a server certificate) from the serving CA; it is valid as
// long as the serving certificate.
func (c *Cert) MintReplica(ctx context.Context, id string) (*tls.Certificate, error) {
	rid, err := ReplicaID(id)
	if err != nil {
		return nil, fmt.Errorf("replica certificate: %w", err)
	}
	m, err := c.auth.Mint(ctx, Mesh, ca.SignOptions{Identities: []ca.ID{rid}, TTL: ttl})
	if err != nil {
		return nil, fmt.Errorf("replica certificate: %w", err)
	}
	cert, err := tls.X509KeyPair(m.ChainPEM, m.KeyPEM)
	if err != nil {
		return nil, fmt.Errorf("replica certificate: %w", err)
	}
	return &cert, nil
}

// Roots is the serving CA's certificate pool: what a replica verifies a
// peer's replica certificate with.
func (c *Cert) Roots() (*x509.CertPool, error) { return c.auth.Roots(Mesh) }
