package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	pb "istio.io/api/security/v1alpha1"

	"github.com/navemesh/nave/internal/x509test"
	"github.com/navemesh/nave/shared/certreq"
	"github.com/navemesh/nave/shared/spiffeid"
)

var (
	testWorkload = spiffeid.ID{TrustDomain: "cluster.local", Path: "/ns/demo/sa/web"}
	testRA       = spiffeid.ID{TrustDomain: "cluster.local", Path: "/nave/cluster/c1"}
)

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fakeRA is an in-process Istio CA API: it signs any CSR with ca for ttl
// (or, with issueFor set, for that identity instead), and records the
// authorization headers it got.
type fakeRA struct {
	pb.UnimplementedIstioCertificateServiceServer
	ca       *x509test.Authority
	ttl      time.Duration
	issueFor string

	mu     sync.Mutex
	tokens []string
	fail   int // requests to refuse first
	// signer, when set, signs instead of ca; bundle, when set, is the
	// answer's last entry instead of ca's certificate (a root rotation).
	signer *x509test.Authority
	bundle []byte
}

// rotate makes the RA sign with signer and answer bundle as the roots.
func (f *fakeRA) rotate(signer *x509test.Authority, bundle ...[]byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.signer, f.bundle = signer, bytes.Join(bundle, nil)
}

func (f *fakeRA) CreateCertificate(ctx context.Context, req *pb.IstioCertificateRequest) (*pb.IstioCertificateResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.mu.Lock()
	f.tokens = append(f.tokens, md.Get("authorization")...)
	fail := f.fail > 0
	f.fail--
	signer, bundle := f.ca, f.ca.PEM()
	if f.signer != nil {
		signer, bundle = f.signer, f.bundle
	}
	f.mu.Unlock()
	if fail {
		return nil, status.Error(codes.Unavailable, "the hub is away")
	}
	csr, err := certreq.Parse([]byte(req.GetCsr()))
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	uris := csr.URIs
	if f.issueFor != "" {
		u, _ := url.Parse(f.issueFor)
		uris = []*url.URL{u}
	}
	ttl := f.ttl
	if ttl == 0 {
		ttl = time.Duration(req.GetValidityDuration()) * time.Second
	}
	leaf := signer.Issue(&x509.Certificate{NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(ttl), URIs: uris,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}}, csr.PublicKey)
	return &pb.IstioCertificateResponse{CertChain: []string{
		string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw})), string(bundle)}}, nil
}

func (f *fakeRA) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.tokens...)
}

// startRA serves f over TLS with a certificate for id; it returns the
// address.
func startRA(t *testing.T, f *fakeRA, id spiffeid.ID) string {
	t.Helper()
	u, _ := url.Parse(id.String())
	cert := f.ca.ServerCert("ra")
	cert.Leaf = f.ca.Issue(&x509.Certificate{URIs: []*url.URL{u}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, cert.Leaf.PublicKey)
	cert.Certificate = [][]byte{cert.Leaf.Raw}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})))
	pb.RegisterIstioCertificateServiceServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// testCredential is a credential for testWorkload from ca, living ttl
// from now.
func testCredential(t *testing.T, ca *x509test.Authority, ttl time.Duration) *Credential {
	t.Helper()
	c, err := makeCredential(ca, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// makeCredential is testCredential for other goroutines than the test's.
func makeCredential(ca *x509test.Authority, ttl time.Duration) (*Credential, error) {
	key, _, err := newKey(testWorkload)
	if err != nil {
		return nil, err
	}
	u, _ := url.Parse(testWorkload.String())
	leaf := ca.Issue(&x509.Certificate{NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(ttl), URIs: []*url.URL{u},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, key.Public())
	return newCredential(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw}), key, testWorkload, ca.Pool(), ca.PEM(), time.Now())
}

var errTest = errors.New("test failure")
