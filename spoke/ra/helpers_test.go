package ra_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	pb "istio.io/api/security/v1alpha1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/navemesh/nave/internal/kubetest"
	"github.com/navemesh/nave/internal/metrictest"
	"github.com/navemesh/nave/internal/testlog"
	"github.com/navemesh/nave/internal/x509test"
	"github.com/navemesh/nave/shared/certreq"
	"github.com/navemesh/nave/spoke/ra"
)

const (
	trustDomain = "acme.example"
	clusterID   = "spiffe://acme.example/nave/cluster/east"
	hubName     = "hub.nave.test"
	// spokeUser is the identity deploy/spoke/rbac.yaml grants.
	spokeUser = "system:serviceaccount:nave-system:nave-spoke"
	callWait  = 30 * time.Second
)

// kube is a real API server with the spoke's RBAC applied, and a client
// acting as the spoke's service account.
type kube struct {
	c     *kubetest.Cluster
	admin kubernetes.Interface
	spoke kubernetes.Interface
}

func startKube(t *testing.T) *kube {
	t.Helper()
	c := kubetest.Start(t, kubetest.Options{})
	c.Apply(t, repoFile(t, "deploy/spoke/namespace.yaml"), repoFile(t, "deploy/spoke/rbac.yaml"))
	admin, err := kubernetes.NewForConfig(c.Admin)
	if err != nil {
		t.Fatal(err)
	}
	spoke, err := kubernetes.NewForConfig(c.As(spokeUser, "system:serviceaccounts", "system:serviceaccounts:nave-system"))
	if err != nil {
		t.Fatal(err)
	}
	return &kube{c: c, admin: admin, spoke: spoke}
}

// serviceAccount creates namespace ns (if missing) and service account sa.
func (k *kube) serviceAccount(t *testing.T, ns, sa string) {
	t.Helper()
	ctx := t.Context()
	_, err := k.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	if _, err := k.admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// token requests a token of ns/sa for audiences (nil: the API server's
// default, its issuer) with the TokenRequest API.
func (k *kube) token(t *testing.T, ns, sa string, audiences ...string) string {
	t.Helper()
	tr, err := k.admin.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", ns, sa, err)
	}
	return tr.Status.Token
}

func repoFile(t *testing.T, rel string) []byte {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found")
		}
		dir = parent
	}
	b, err := os.ReadFile(filepath.Join(dir, rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// mesh is the test's mesh CA, the spoke's cluster certificate and the
// hub's serving certificate.
type mesh struct {
	ca      *x509test.Authority // the mesh's root
	spoke   tls.Certificate     // the cluster certificate, as hub/ca issues it
	serving *x509test.Authority // the hub's serving root
}

func newMesh() *mesh {
	m := &mesh{ca: x509test.NewAuthority("acme mesh root"), serving: x509test.NewAuthority("hub serving root")}
	key := newKey()
	leaf := m.ca.Issue(&x509.Certificate{
		URIs:                  []*url.URL{mustURL(clusterID)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}, key.Public())
	m.spoke = tls.Certificate{Certificate: [][]byte{leaf.Raw, m.ca.Cert.Raw}, PrivateKey: key, Leaf: leaf}
	return m
}

// hubCall is what the fake hub received.
type hubCall struct {
	req  *pb.IstioCertificateRequest
	peer string // the caller's certificate's URI SAN
}

// fakeHub is a real gRPC server on 127.0.0.1 with mTLS implementing Istio's
// CA API: it records every call and signs the CSR's key for the
// ImpersonatedIdentity with the mesh's root, or returns err if set.
type fakeHub struct {
	pb.UnimplementedIstioCertificateServiceServer
	addr string
	m    *mesh

	mu    sync.Mutex
	calls []hubCall
	err   error
	resp  *pb.IstioCertificateResponse // the last answer sent
}

func startFakeHub(t *testing.T, m *mesh) *fakeHub {
	t.Helper()
	h := &fakeHub{m: m}
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{m.serving.ServerCert(hubName)},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    m.ca.Pool(),
		MinVersion:   tls.VersionTLS13,
	})))
	pb.RegisterIstioCertificateServiceServer(gs, h)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = lis.Addr().String()
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return h
}

func (h *fakeHub) CreateCertificate(ctx context.Context, req *pb.IstioCertificateRequest) (*pb.IstioCertificateResponse, error) {
	var caller string
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 && len(ti.State.PeerCertificates[0].URIs) == 1 {
			caller = ti.State.PeerCertificates[0].URIs[0].String()
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, hubCall{req: req, peer: caller})
	if h.err != nil {
		return nil, h.err
	}
	id := req.GetMetadata().GetFields()[certreq.ImpersonatedIdentityKey].GetStringValue()
	csr, err := certreq.Parse([]byte(req.GetCsr()))
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	leaf := h.m.ca.Issue(&x509.Certificate{
		URIs:        []*url.URL{mustURL(id)},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		NotAfter:    time.Now().Add(time.Duration(req.GetValidityDuration()) * time.Second),
	}, csr.PublicKey)
	h.resp = &pb.IstioCertificateResponse{CertChain: []string{
		string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw})),
		string(h.m.ca.PEM()),
	}}
	return h.resp, nil
}

func (h *fakeHub) setErr(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.err = err
}

func (h *fakeHub) callCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.calls)
}

func (h *fakeHub) lastCall() (hubCall, *pb.IstioCertificateResponse) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.calls) == 0 {
		return hubCall{}, nil
	}
	return h.calls[len(h.calls)-1], h.resp
}

// dialHub is the spoke's mTLS connection to the hub, presenting its
// cluster certificate.
func dialHub(t *testing.T, addr string, m *mesh) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs:              m.serving.Pool(),
		ServerName:           hubName,
		MinVersion:           tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &m.spoke, nil },
	})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// logBuffer collects the RA's audit log.
type logBuffer = testlog.Buffer

// raFixture is an RA served over TLS on 127.0.0.1.
type raFixture struct {
	srv   *ra.Server
	addr  string
	reg   *prometheus.Registry
	logs  *logBuffer
	roots *x509.CertPool // the mesh's, which the RA's certificate verifies against
}

// startRA serves an RA reviewing tokens with reviewer and forwarding to
// hubConn, with the mesh's cluster certificate.
func startRA(t *testing.T, m *mesh, reviewer ra.TokenReviewer, hubConn *grpc.ClientConn, opts ra.Options) *raFixture {
	t.Helper()
	return serveRA(t, m.ca.Pool(), func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &m.spoke, nil }, reviewer, hubConn, opts)
}

// serveRA serves an RA presenting the certificate getCert returns, which
// verifies against roots.
func serveRA(t *testing.T, roots *x509.CertPool, getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error),
	reviewer ra.TokenReviewer, hubConn *grpc.ClientConn, opts ra.Options) *raFixture {
	t.Helper()
	f := &raFixture{reg: prometheus.NewRegistry(), logs: &logBuffer{}, roots: roots}
	opts.Reviewer = reviewer
	opts.Hub = pb.NewIstioCertificateServiceClient(hubConn)
	if opts.TrustDomain == "" {
		opts.TrustDomain = trustDomain
	}
	opts.Logger = slog.New(slog.NewJSONHandler(f.logs, nil))
	opts.Registerer = f.reg
	srv, err := ra.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = srv
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = lis.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- srv.Serve(ctx, lis, getCert)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		if t.Failed() {
			t.Logf("RA log:\n%s", f.logs.String())
		}
	})
	return f
}

// workloadTLS is how a workload trusts its RA: the chain verifies against
// the mesh's root and the leaf's only URI SAN is the cluster's SPIFFE ID
// (the cluster certificate has no DNS name to check).
func workloadTLS(roots *x509.CertPool) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, // verified below, as a SPIFFE ID
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			leaf := cs.PeerCertificates[0]
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
				return err
			}
			if len(leaf.URIs) != 1 || leaf.URIs[0].String() != clusterID {
				return fmt.Errorf("RA certificate is for %v, want %s", leaf.URIs, clusterID)
			}
			return nil
		},
	}
}

// call calls the RA as a workload with the authorization metadata auth
// ("" for none).
func (f *raFixture) call(t *testing.T, auth, csr string, validity int64) (*pb.IstioCertificateResponse, error) {
	t.Helper()
	conn, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(credentials.NewTLS(workloadTLS(f.roots))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), callWait)
	defer cancel()
	if auth != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", auth)
	}
	return pb.NewIstioCertificateServiceClient(conn).CreateCertificate(ctx, &pb.IstioCertificateRequest{Csr: csr, ValidityDuration: validity})
}

// counter is the value of name{reason} ("" for no label) in reg.
func counter(t *testing.T, reg *prometheus.Registry, name, reason string) float64 {
	t.Helper()
	if reason == "" {
		return metrictest.Value(t, reg, name)
	}
	return metrictest.Value(t, reg, name, "reason", reason)
}

func newKey() *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	return k
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

// csrFor is a CSR with tmpl's SANs (URIs given as strings) for key.
func csrFor(t *testing.T, key *ecdsa.PrivateKey, tmpl x509.CertificateRequest, uris ...string) string {
	t.Helper()
	for _, u := range uris {
		tmpl.URIs = append(tmpl.URIs, mustURL(u))
	}
	if tmpl.Subject.CommonName == "" {
		tmpl.Subject = pkix.Name{}
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

// wantStatus fails unless err has code and its message contains every one
// of says.
func wantStatus(t *testing.T, err error, code codes.Code, says ...string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != code {
		t.Errorf("got %v, want %s", err, code)
		return
	}
	for _, s := range says {
		if !strings.Contains(st.Message(), s) {
			t.Errorf("got %q, want it to say %q", st.Message(), s)
		}
	}
}

var deleteNow = metav1.DeleteOptions{}
