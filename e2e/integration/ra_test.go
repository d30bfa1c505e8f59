package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	pb "istio.io/api/security/v1alpha1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/hub/enroll"
	"github.com/navemesh/nave/hub/enroll/enrolltest"
	"github.com/navemesh/nave/internal/kubetest"
	"github.com/navemesh/nave/shared/certreq/certreqtest"
	spokeenroll "github.com/navemesh/nave/spoke/enroll"
	"github.com/navemesh/nave/spoke/ra"
)

// raCluster is the cluster the RA tests' spoke is enrolled as.
const raCluster = "east"

// realHub is the hub's enrollment fixture with its real CA (hub/ca, meshes
// acme and beta) serving Istio's CA API with enroll.SpokeRAAuthorizer, as
// nave-hub does on its spokes listener; and a spoke of cluster east in
// mesh acme, enrolled with spoke/enroll and holding a Renewer.
func realHub(t *testing.T) (*enrolltest.Hub, *ca.Authority, *spokeenroll.Renewer) {
	t.Helper()
	ctx := t.Context()
	store, err := ca.NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	auth, err := ca.New(store, ca.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []ca.Mesh{{Name: enrolltest.MeshA, TrustDomain: enrolltest.TrustDomainA}, {Name: enrolltest.MeshB, TrustDomain: enrolltest.TrustDomainB}} {
		if err := auth.Load(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	h := enrolltest.StartHub(t, enrolltest.HubOptions{Signer: auth, Register: func(s *grpc.Server, h *enrolltest.Hub) {
		ca.NewServer(auth, enroll.SpokeRAAuthorizer{Auth: h.Auth, Signer: auth, Next: ca.PeerCertificateAuthorizer{Authority: auth}}, ca.ServerOptions{}).Register(s)
	}})
	tok, _, err := h.Store.CreateToken(t.Context(), enrolltest.MeshA, raCluster, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := spokeenroll.Enroll(ctx, spokeenroll.Options{Address: h.Addr, ServerName: enrolltest.ServerName,
		HubCA: h.Serving.PEM(), StateDir: dir}, tok); err != nil {
		t.Fatalf("enroll: %v", err)
	}
	r, err := spokeenroll.NewRenewer(spokeenroll.RenewerOptions{Address: h.Addr, ServerName: enrolltest.ServerName, StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return h, auth, r
}

// TestSpokeRAWithTheHubsRealCA: the spoke's RA against a real API server
// (as the nave-spoke service account, with deploy/spoke's RBAC) and the
// hub's real CA and authorizer (the hub-side contract): the spoke, enrolled
// and connected with its Renewer's TLS, obtains the workload's certificate
// from the mesh's CA; what the hub refuses is passed back.
func TestSpokeRAWithTheHubsRealCA(t *testing.T) {
	admin, spoke := startSpokeKube(t)
	serviceAccount(t, admin, "shop", "cart")
	h, auth, r := realHub(t)
	hubConn, err := grpc.NewClient(h.Addr, grpc.WithTransportCredentials(credentials.NewTLS(r.ClientTLS())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hubConn.Close() })
	roots, err := auth.Roots(enrolltest.MeshA)
	if err != nil {
		t.Fatal(err)
	}
	serving := func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		c := r.Credentials().Certificate
		return &c, nil
	}
	f := serveRA(t, roots, serving, ra.KubeReviewer(spoke), hubConn, ra.Options{TrustDomain: enrolltest.TrustDomainA})
	const id = "spiffe://acme.example/ns/shop/sa/cart"
	bearer := "Bearer " + saToken(t, admin, "shop", "cart", ra.DefaultAudience)

	key := certreqtest.ECKey(t)
	resp, err := f.call(t, bearer, csrFor(t, key, id), 600)
	if err != nil {
		t.Fatalf("CreateCertificate: %v", err)
	}
	chain := resp.GetCertChain()
	if len(chain) < 2 {
		t.Fatalf("chain of %d certificates, want the leaf and the root", len(chain))
	}
	certs := make([]*x509.Certificate, len(chain))
	for i, p := range chain {
		b, _ := pem.Decode([]byte(p))
		if b == nil {
			t.Fatalf("chain[%d] is not PEM", i)
		}
		if certs[i], err = x509.ParseCertificate(b.Bytes); err != nil {
			t.Fatal(err)
		}
	}
	leaf, root := certs[0], certs[len(certs)-1]
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("leaf does not verify against mesh acme's roots: %v", err)
	}
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != id || !key.PublicKey.Equal(leaf.PublicKey) {
		t.Errorf("leaf is for %v (or another key), want %s", leaf.URIs, id)
	}
	if !root.IsCA || root.CheckSignatureFrom(root) != nil {
		t.Errorf("the chain does not end with the root")
	}
	if got := leaf.NotAfter.Sub(leaf.NotBefore); got > 20*time.Minute {
		t.Errorf("leaf valid for %s, asked for 10 minutes", got)
	}

	// A spoke configured with another mesh's trust domain: its own checks
	// pass, the hub refuses (only its own mesh's workloads).
	beta := serveRA(t, roots, serving, ra.KubeReviewer(spoke), hubConn, ra.Options{TrustDomain: enrolltest.TrustDomainB})
	_, err = beta.call(t, bearer, csrFor(t, certreqtest.ECKey(t), "spiffe://beta.example/ns/shop/sa/cart"), 0)
	wantStatus(t, err, codes.PermissionDenied, "hub: ", `not in mesh "acme"'s trust domain`)

	// A revoked cluster obtains nothing.
	if err := h.Store.Revoke(t.Context(), enrolltest.MeshA, raCluster); err != nil {
		t.Fatal(err)
	}
	_, err = f.call(t, bearer, csrFor(t, certreqtest.ECKey(t), id), 0)
	wantStatus(t, err, codes.PermissionDenied, "hub: ", "revoked")
	if st := f.srv.Status(); st.Certificates != 1 || st.Refusals[ra.ReasonHubError] != 1 {
		t.Errorf("Status() = %+v", st)
	}
}

// startSpokeKube starts a real API server with deploy/spoke's namespace
// and RBAC applied, and returns an admin client and one acting as the
// spoke's service account.
func startSpokeKube(t *testing.T) (admin, spoke kubernetes.Interface) {
	t.Helper()
	c := kubetest.Start(t, kubetest.Options{})
	var manifests [][]byte
	for _, f := range []string{"namespace.yaml", "rbac.yaml"} {
		b, err := os.ReadFile(filepath.Join(harness.ModuleRoot(), "deploy", "spoke", f))
		if err != nil {
			t.Fatal(err)
		}
		manifests = append(manifests, b)
	}
	c.Apply(t, manifests...)
	admin, err := kubernetes.NewForConfig(c.Admin)
	if err != nil {
		t.Fatal(err)
	}
	spoke, err = kubernetes.NewForConfig(c.As("system:serviceaccount:nave-system:nave-spoke",
		"system:serviceaccounts", "system:serviceaccounts:nave-system"))
	if err != nil {
		t.Fatal(err)
	}
	return admin, spoke
}

// serviceAccount creates namespace ns and service account sa in it.
func serviceAccount(t *testing.T, admin kubernetes.Interface, ns, sa string) {
	t.Helper()
	if _, err := admin.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// saToken requests a token of ns/sa for audiences with the TokenRequest
// API.
func saToken(t *testing.T, admin kubernetes.Interface, ns, sa string, audiences ...string) string {
	t.Helper()
	tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", ns, sa, err)
	}
	return tr.Status.Token
}

// raServer is a spoke RA served over TLS on 127.0.0.1.
type raServer struct {
	srv   *ra.Server
	addr  string
	roots *x509.CertPool // the mesh's, which the RA's certificate verifies against
}

// serveRA serves an RA reviewing tokens with reviewer and forwarding to
// hubConn, presenting the certificate getCert returns, which verifies
// against roots.
func serveRA(t *testing.T, roots *x509.CertPool, getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error),
	reviewer ra.TokenReviewer, hubConn *grpc.ClientConn, opts ra.Options) *raServer {
	t.Helper()
	opts.Reviewer = reviewer
	opts.Hub = pb.NewIstioCertificateServiceClient(hubConn)
	srv, err := ra.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis, getCert) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &raServer{srv: srv, addr: lis.Addr().String(), roots: roots}
}

// call calls the RA as a workload would, with the authorization metadata
// auth, trusting the RA by the mesh's roots and the cluster's SPIFFE ID.
func (f *raServer) call(t *testing.T, auth, csr string, validity int64) (*pb.IstioCertificateResponse, error) {
	t.Helper()
	clusterID := "spiffe://" + enrolltest.TrustDomainA + "/nave/cluster/" + raCluster
	conn, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
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
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: f.roots, Intermediates: inter,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
				return err
			}
			if len(leaf.URIs) != 1 || leaf.URIs[0].String() != clusterID {
				return fmt.Errorf("RA certificate is for %v, want %s", leaf.URIs, clusterID)
			}
			return nil
		},
	})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", auth), 30*time.Second)
	defer cancel()
	return pb.NewIstioCertificateServiceClient(conn).CreateCertificate(ctx, &pb.IstioCertificateRequest{Csr: csr, ValidityDuration: validity})
}

// csrFor is a PEM CSR for key with the URI SAN uri.
func csrFor(t *testing.T, key *ecdsa.PrivateKey, uri string) string {
	t.Helper()
	return string(certreqtest.New(t, key, certreqtest.Template{URIs: []string{uri}}))
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
