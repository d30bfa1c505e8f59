package enroll_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"
	pb "istio.io/api/security/v1alpha1"

	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/hub/enroll"
	"github.com/navemesh/nave/hub/enroll/enrolltest"
	"github.com/navemesh/nave/shared/certreq"
)

// raHub is the enrollment fixture with the hub's real CA (meshes acme and
// beta) serving Istio's CA API the way nave-hub does on its spokes listener.
func raHub(t *testing.T) (*enrolltest.Hub, *ca.Authority) {
	t.Helper()
	store, err := ca.NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	auth, err := ca.New(store, ca.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []ca.Mesh{{Name: enrolltest.MeshA, TrustDomain: enrolltest.TrustDomainA}, {Name: enrolltest.MeshB, TrustDomain: enrolltest.TrustDomainB}} {
		if err := auth.Load(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	h := enrolltest.StartHub(t, enrolltest.HubOptions{Signer: auth, Register: func(s *grpc.Server, h *enrolltest.Hub) {
		ca.NewServer(auth, enroll.SpokeRAAuthorizer{Auth: h.Auth, Signer: auth, Next: ca.PeerCertificateAuthorizer{Authority: auth}}, ca.ServerOptions{}).Register(s)
	}})
	return h, auth
}

// workloadCSR is a CSR for the SPIFFE ID id.
func workloadCSR(t *testing.T, id string) (*ecdsa.PrivateKey, string) {
	t.Helper()
	key, _ := newCSR(t)
	u, err := url.Parse(id)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{u}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return key, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

func createCert(t *testing.T, h *enrolltest.Hub, cert *tls.Certificate, csr, impersonate string) (*pb.IstioCertificateResponse, error) {
	t.Helper()
	req := &pb.IstioCertificateRequest{Csr: csr}
	if impersonate != "" {
		req.Metadata = &structpb.Struct{Fields: map[string]*structpb.Value{certreq.ImpersonatedIdentityKey: structpb.NewStringValue(impersonate)}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	return pb.NewIstioCertificateServiceClient(h.Dial(t, cert)).CreateCertificate(ctx, req)
}

// A spoke (its cluster certificate) obtains a workload certificate on a
// workload's behalf, in its own mesh only; the workload then renews its own
// with that certificate and can obtain nothing else.
func TestSpokeObtainsWorkloadCertificates(t *testing.T) {
	h, auth := raHub(t)
	spoke := enrolled(t, h, enrolltest.MeshA, "east")
	const id = "spiffe://acme.example/ns/shop/sa/cart"

	key, csr := workloadCSR(t, id)
	resp, err := createCert(t, h, &spoke, csr, id)
	if err != nil {
		t.Fatalf("spoke for %s: %v", id, err)
	}
	chain := strings.Join(resp.GetCertChain(), "")
	block, _ := pem.Decode([]byte(chain))
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots, _ := auth.Roots(enrolltest.MeshA)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil || leaf.URIs[0].String() != id {
		t.Fatalf("issued %v: %v", leaf.URIs, err)
	}

	for _, tc := range []struct {
		name, csrID, impersonate string
		code                     codes.Code
		says                     string
	}{
		{"no impersonated identity", id, "", codes.PermissionDenied, "only for its workloads"},
		{"another mesh's trust domain", "spiffe://beta.example/ns/shop/sa/cart", "spiffe://beta.example/ns/shop/sa/cart", codes.PermissionDenied, `not in mesh "acme"'s trust domain`},
		{"a cluster identity", "spiffe://acme.example/nave/cluster/west", "spiffe://acme.example/nave/cluster/west", codes.PermissionDenied, "ImpersonatedIdentity"},
		{"a CSR for another identity than asked", "spiffe://acme.example/ns/shop/sa/admin", id, codes.PermissionDenied, "not an identity this caller may obtain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, csr := workloadCSR(t, tc.csrID)
			_, err := createCert(t, h, &spoke, csr, tc.impersonate)
			wantStatus(t, tc.name, err, tc.code, tc.says)
		})
	}

	// The workload renews its own identity with its certificate; asking
	// for another on someone's behalf does not widen what it gets.
	wl := keyPair(t, []byte(chain), key)
	if _, err := createCert(t, h, &wl, csr, ""); err != nil {
		t.Errorf("workload renewing itself: %v", err)
	}
	_, other := workloadCSR(t, "spiffe://acme.example/ns/shop/sa/admin")
	_, err = createCert(t, h, &wl, other, "spiffe://acme.example/ns/shop/sa/admin")
	wantStatus(t, "workload impersonating", err, codes.PermissionDenied, "not an identity this caller may obtain")

	// A cluster enrolled with a token scoped to namespaces obtains
	// identities of those only.
	tok, _, err := h.Store.CreateToken(t.Context(), enrolltest.MeshA, "scoped", time.Hour, "shop")
	if err != nil {
		t.Fatal(err)
	}
	se := enrollCall(t, h, tok)
	if se.err != nil {
		t.Fatal(se.err)
	}
	if _, err := createCert(t, h, &se.cert, csr, id); err != nil {
		t.Errorf("scoped spoke for its namespace: %v", err)
	}
	_, bank := workloadCSR(t, "spiffe://acme.example/ns/bank/sa/teller")
	_, err = createCert(t, h, &se.cert, bank, "spiffe://acme.example/ns/bank/sa/teller")
	wantStatus(t, "scoped spoke outside its namespaces", err, codes.PermissionDenied, `namespace "bank" is outside the cluster's scope (shop)`)

	// A revoked cluster obtains nothing.
	if err := h.Store.Revoke(t.Context(), enrolltest.MeshA, "east"); err != nil {
		t.Fatal(err)
	}
	_, err = createCert(t, h, &spoke, csr, id)
	wantStatus(t, "revoked spoke", err, codes.PermissionDenied, "revoked")
}
