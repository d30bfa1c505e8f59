package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	pb "istio.io/api/security/v1alpha1"

	"github.com/navemesh/nave/shared/spiffeid"
	"github.com/navemesh/nave/shared/tlsconfig"
)

// RAClient asks the spoke's registration authority (Istio's CA API) for
// the workload's certificate. Safe for concurrent use.
//
// The mesh's roots it trusts start as RAOptions.RootsPEM and follow the
// bundle each answer carries (its last entry, as Istio's CA answers), so
// that a root rotation reaches a running agent with its next certificate:
// the bundle comes over the connection to the RA, authenticated with the
// roots trusted until then, and is taken only if the issued certificate
// verifies against it (decision 031).
type RAClient struct {
	conn      *grpc.ClientConn
	client    pb.IstioCertificateServiceClient
	tokenFile string
	id        spiffeid.ID
	ttl       time.Duration
	trust     atomic.Pointer[trust]
	now       func() time.Time
}

// trust is a set of roots, as a pool and as the PEM they came in.
type trust struct {
	pool *x509.CertPool
	pem  []byte
}

// RAOptions configure an RAClient.
type RAOptions struct {
	// Address is the RA's host:port; Identity the SPIFFE ID its
	// certificate must carry, chaining to RootsPEM (the mesh roots).
	Address  string
	Identity spiffeid.ID
	RootsPEM []byte
	// TokenFile holds the service-account token, read for every request.
	TokenFile string
	// Workload is the identity asked for; TTL the lifetime asked for.
	Workload spiffeid.ID
	TTL      time.Duration
}

// DialRA makes a client of the RA; the connection is made on first use.
func DialRA(o RAOptions) (*RAClient, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(o.RootsPEM) {
		return nil, fmt.Errorf("the mesh roots hold no PEM certificate")
	}
	c := &RAClient{tokenFile: o.TokenFile, id: o.Workload, ttl: o.TTL, now: time.Now}
	c.trust.Store(&trust{pool: roots, pem: o.RootsPEM})
	// The RA has no DNS name: its chain and SPIFFE ID are verified here.
	conf := tlsconfig.VerifyingClient(func(cs tls.ConnectionState) error {
		raw := make([][]byte, len(cs.PeerCertificates))
		for i, cert := range cs.PeerCertificates {
			raw[i] = cert.Raw
		}
		if _, err := spiffeid.VerifyChain(raw, c.trust.Load().pool, x509.ExtKeyUsageServerAuth, o.Identity); err != nil {
			return fmt.Errorf("registration authority %s: %w", o.Address, err)
		}
		return nil
	}, nil)
	conn, err := grpc.NewClient(o.Address, grpc.WithTransportCredentials(credentials.NewTLS(conf)))
	if err != nil {
		return nil, fmt.Errorf("registration authority %s: %w", o.Address, err)
	}
	c.conn, c.client = conn, pb.NewIstioCertificateServiceClient(conn)
	return c, nil
}

// RootsPEM returns the mesh roots the client trusts now.
func (c *RAClient) RootsPEM() []byte { return c.trust.Load().pem }

// Close closes the connection.
func (c *RAClient) Close() error { return c.conn.Close() }

// authorized returns ctx with the service-account token as the call's
// "authorization: Bearer" metadata, read from the token file now (the
// kubelet rotates it).
func (c *RAClient) authorized(ctx context.Context) (context.Context, error) {
	raw, err := os.ReadFile(c.tokenFile)
	if err != nil {
		return nil, fmt.Errorf("service-account token: %w", err)
	}
	token := string(bytes.TrimSpace(raw))
	if token == "" {
		return nil, fmt.Errorf("service-account token %s is empty", c.tokenFile)
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token), nil
}

// Request generates a new key and asks for its certificate.
func (c *RAClient) Request(ctx context.Context) (*Credential, error) {
	ctx, err := c.authorized(ctx)
	if err != nil {
		return nil, err
	}
	key, csr, err := newKey(c.id)
	if err != nil {
		return nil, err
	}
	resp, err := c.client.CreateCertificate(ctx, &pb.IstioCertificateRequest{Csr: string(csr), ValidityDuration: int64(c.ttl / time.Second)})
	if err != nil {
		return nil, fmt.Errorf("registration authority: %w", err)
	}
	chain := resp.GetCertChain()
	cur := c.trust.Load()
	next := cur
	// The last entry is the mesh's bundle (Istio's answer): the chain is
	// the entries before it.
	if n := len(chain); n > 1 {
		b, err := parseBundle(chain[n-1])
		if err != nil {
			return nil, fmt.Errorf("registration authority: the last entry of the answer (the mesh roots): %w", err)
		}
		next, chain = b, chain[:n-1]
	}
	var b strings.Builder
	for _, p := range chain {
		b.WriteString(p)
		if !strings.HasSuffix(p, "\n") {
			b.WriteByte('\n')
		}
	}
	cred, err := newCredential([]byte(b.String()), key, c.id, next.pool, next.pem, c.now())
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(next.pem, cur.pem) {
		c.trust.CompareAndSwap(cur, next)
	}
	return cred, nil
}

// maxBundleRoots bounds the roots one bundle may hold: a rotation needs 2.
const maxBundleRoots = 16

// parseBundle parses a bundle of mesh roots: PEM CERTIFICATE blocks only
// (text between them is ignored), each a CA certificate, 1 to
// maxBundleRoots of them.
func parseBundle(s string) (*trust, error) {
	pool := x509.NewCertPool()
	var out bytes.Buffer
	n := 0
	for rest := []byte(s); ; {
		var blk *pem.Block
		if blk, rest = pem.Decode(rest); blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block %d is %q, want CERTIFICATE", n+1, blk.Type)
		}
		cert, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", n+1, err)
		}
		if !cert.IsCA || !cert.BasicConstraintsValid {
			return nil, fmt.Errorf("certificate %d (%s) is not a CA certificate", n+1, cert.Subject)
		}
		if n++; n > maxBundleRoots {
			return nil, fmt.Errorf("more than %d certificates", maxBundleRoots)
		}
		pool.AddCert(cert)
		_ = pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: blk.Bytes})
	}
	if n == 0 {
		return nil, fmt.Errorf("no PEM certificate")
	}
	return &trust{pool: pool, pem: out.Bytes()}, nil
}
