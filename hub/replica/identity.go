package replica

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/hub/servingcert"
	"github.com/navemesh/nave/shared/tlsconfig"
)

// replicaPathPrefix starts the path of a replica's SPIFFE ID
// (servingcert.ReplicaID).
const replicaPathPrefix = "/nave/replica/"

// Identity is this replica's relay certificate, from the hub's serving CA,
// and the roots peers' certificates are checked against. It renews the
// certificate when due, on the handshake that finds it so. It is safe for
// concurrent use.
type Identity struct {
	id    string
	mint  func(ctx context.Context, id string) (*tls.Certificate, error)
	roots *x509.CertPool

	mu      sync.Mutex
	current *tls.Certificate
	renewAt time.Time
}

// NewIdentity mints replica id's certificate from the serving CA.
func NewIdentity(ctx context.Context, serving *servingcert.Cert, id string) (*Identity, error) {
	roots, err := serving.Roots()
	if err != nil {
		return nil, fmt.Errorf("replica identity: %w", err)
	}
	i := &Identity{id: id, mint: serving.MintReplica, roots: roots}
	if _, err := i.certificate(ctx); err != nil {
		return nil, err
	}
	return i, nil
}

func (i *Identity) certificate(ctx context.Context) (*tls.Certificate, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.current == nil || time.Now().After(i.renewAt) {
		c, err := i.mint(ctx, i.id)
		if err != nil {
			if i.current != nil {
				return i.current, nil // still valid: renewal is retried on the next handshake
			}
			return nil, err
		}
		i.current, i.renewAt = c, ca.RenewAt(c.Leaf)
	}
	return i.current, nil
}

// ServerConfig is the relay listener's TLS configuration: it serves the
// replica certificate and requires a client certificate of another
// replica, refusing any other (a spoke's, a workload's, the hub's serving
// certificate); each refusal is counted in m (nil: nowhere) and logged on
// log (nil: nowhere).
func (i *Identity) ServerConfig(m *Metrics, log *slog.Logger) *tls.Config {
	c := tlsconfig.MutualServer(tlsconfig.Ours, i.present(), tls.RequireAnyClientCert, nil)
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		_, err := i.verify(cs.PeerCertificates, x509.ExtKeyUsageClientAuth)
		if err != nil {
			if m != nil {
				m.refused.Inc()
			}
			if log != nil {
				log.Warn("relay connection refused", "reason", err)
			}
		}
		return err
	}
	return c
}

// ClientConfig is the TLS configuration to dial peer replica peer's
// relay listener: the server must present peer's replica certificate.
// The chain and the SPIFFE ID are checked here: a replica is dialled by
// the address it gossips, not by a name in its certificate.
func (i *Identity) ClientConfig(peer string) *tls.Config {
	return tlsconfig.VerifyingClient(func(cs tls.ConnectionState) error {
		got, err := i.verify(cs.PeerCertificates, x509.ExtKeyUsageServerAuth)
		if err != nil {
			return err
		}
		if got != peer {
			return fmt.Errorf("relay of replica %s presented the certificate of replica %s", peer, got)
		}
		return nil
	}, i.present())
}

// present presents the replica certificate, renewed first when due.
func (i *Identity) present() tlsconfig.Certificate {
	return func() (*tls.Certificate, error) { return i.certificate(context.Background()) }
}

// verify checks a peer's chain against the serving CA and returns the
// replica id its SPIFFE ID names.
func (i *Identity) verify(chain []*x509.Certificate, usage x509.ExtKeyUsage) (string, error) {
	return verifyReplica(chain, i.roots, usage)
}

func verifyReplica(chain []*x509.Certificate, roots *x509.CertPool, usage x509.ExtKeyUsage) (string, error) {
	if len(chain) == 0 {
		return "", errors.New("no replica certificate presented")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return "", fmt.Errorf("not a certificate of the hub's serving CA: %w", err)
	}
	return replicaOf(chain[0].URIs)
}

// replicaOf returns the replica id of a certificate's URI SANs: exactly
// one, spiffe://hub.nave.internal/nave/replica/<id>.
func replicaOf(uris []*url.URL) (string, error) {
	if len(uris) != 1 {
		return "", fmt.Errorf("certificate has %d URI SANs, want one replica SPIFFE ID", len(uris))
	}
	id, err := ca.ParseID(uris[0].String())
	if err != nil {
		return "", fmt.Errorf("certificate: %w", err)
	}
	name, ok := strings.CutPrefix(id.Path, replicaPathPrefix)
	if id.TrustDomain != servingcert.TrustDomain || !ok || name == "" || strings.Contains(name, "/") {
		return "", fmt.Errorf("certificate of %s is not a hub replica's (want spiffe://%s%s<id>)", id, servingcert.TrustDomain, replicaPathPrefix)
	}
	return name, nil
}
