package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	pb "istio.io/api/security/v1alpha1"

	"github.com/navemesh/nave/shared/spiffeid"
)

// RAClient asks the spoke's registration authority (Istio's CA API) for
// the workload's certificate. Safe for concurrent use.
type RAClient struct {
	conn      *grpc.ClientConn
	client    pb.IstioCertificateServiceClient
	tokenFile string
	id        spiffeid.ID
	ttl       time.Duration
	roots     *x509.CertPool
	rootsPEM  []byte
	now       func() time.Time
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
	conf := &tls.Config{MinVersion: tls.VersionTLS12,
		InsecureSkipVerify: true, // the RA has no DNS name: VerifyPeerCertificate verifies its chain and SPIFFE ID
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if _, err := spiffeid.VerifyChain(raw, roots, x509.ExtKeyUsageServerAuth, o.Identity); err != nil {
				return fmt.Errorf("registration authority %s: %w", o.Address, err)
			}
			return nil
		}}
	conn, err := grpc.NewClient(o.Address, grpc.WithTransportCredentials(credentials.NewTLS(conf)))
	if err != nil {
		return nil, fmt.Errorf("registration authority %s: %w", o.Address, err)
	}
	return &RAClient{conn: conn, client: pb.NewIstioCertificateServiceClient(conn), tokenFile: o.TokenFile,
		id: o.Workload, ttl: o.TTL, roots: roots, rootsPEM: o.RootsPEM, now: time.Now}, nil
}

// Close closes the connection.
func (c *RAClient) Close() error { return c.conn.Close() }

// Request generates a new key and asks for its certificate.
func (c *RAClient) Request(ctx context.Context) (*Credential, error) {
	raw, err := os.ReadFile(c.tokenFile)
	if err != nil {
		return nil, fmt.Errorf("service-account token: %w", err)
	}
	token := string(bytes.TrimSpace(raw))
	if token == "" {
		return nil, fmt.Errorf("service-account token %s is empty", c.tokenFile)
	}
	key, csr, err := newKey(c.id)
	if err != nil {
		return nil, err
	}
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	resp, err := c.client.CreateCertificate(ctx, &pb.IstioCertificateRequest{Csr: string(csr), ValidityDuration: int64(c.ttl / time.Second)})
	if err != nil {
		return nil, fmt.Errorf("registration authority: %w", err)
	}
	chain := resp.GetCertChain()
	var b strings.Builder
	for _, p := range chain {
		b.WriteString(p)
		if !strings.HasSuffix(p, "\n") {
			b.WriteByte('\n')
		}
	}
	return newCredential([]byte(b.String()), key, c.id, c.roots, c.rootsPEM, c.now())
}
