package ra_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"

	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/hub/enroll"
	"github.com/navemesh/nave/hub/enroll/enrolltest"
	spokeenroll "github.com/navemesh/nave/spoke/enroll"
	"github.com/navemesh/nave/spoke/ra"
)

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
	tok, _, err := h.Store.CreateToken(enrolltest.MeshA, cluster, time.Hour)
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

// The RA with the hub's real CA and authorizer (the hub-side contract):
// the spoke, enrolled and connected with its Renewer's TLS, obtains the
// workload's certificate from the mesh's CA; what the hub refuses is passed
// back.
func testRealHub(t *testing.T, k *kube) {
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
	f := serveRA(t, roots, serving, ra.KubeReviewer(k.spoke), hubConn, ra.Options{TrustDomain: enrolltest.TrustDomainA})
	const id = "spiffe://acme.example/ns/shop/sa/cart"
	bearer := "Bearer " + k.token(t, "shop", "cart", ra.DefaultAudience)

	key := newKey()
	resp, err := f.call(t, bearer, csrFor(t, key, x509.CertificateRequest{}, id), 600)
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
	beta := serveRA(t, roots, serving, ra.KubeReviewer(k.spoke), hubConn, ra.Options{TrustDomain: enrolltest.TrustDomainB})
	_, err = beta.call(t, bearer, csrFor(t, newKey(), x509.CertificateRequest{}, "spiffe://beta.example/ns/shop/sa/cart"), 0)
	wantStatus(t, err, codes.PermissionDenied, "hub: ", `not in mesh "acme"'s trust domain`)

	// A revoked cluster obtains nothing.
	if err := h.Store.Revoke(enrolltest.MeshA, cluster); err != nil {
		t.Fatal(err)
	}
	_, err = f.call(t, bearer, csrFor(t, newKey(), x509.CertificateRequest{}, id), 0)
	wantStatus(t, err, codes.PermissionDenied, "hub: ", "revoked")
	if st := f.srv.Status(); st.Certificates != 1 || st.Refusals[ra.ReasonHubError] != 1 {
		t.Errorf("Status() = %+v", st)
	}
}
