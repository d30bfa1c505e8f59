package ra_test

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/navemesh/nave/shared/certreq"
	"github.com/navemesh/nave/spoke/ra"
)

const (
	// apiServerAudience is kubetest's service-account issuer, the API
	// server's default audience.
	apiServerAudience = "https://kubernetes.default.svc"
	certsMetric       = "nave_spoke_ra_certificates_total"
	refusalsMetric    = "nave_spoke_ra_refusals_total"
)

// The RA against a real API server (as the nave-spoke service account,
// with deploy/spoke's RBAC) and a hub that records what reaches it. With
// the hub's real CA it is tested in e2e/integration
// (TestSpokeRAWithTheHubsRealCA).
func TestRA(t *testing.T) {
	k := startKube(t)
	k.serviceAccount(t, "shop", "cart")
	k.serviceAccount(t, "shop", "admin")
	m := newMesh()
	hub := startFakeHub(t, m)
	f := startRA(t, m, ra.KubeReviewer(k.spoke), dialHub(t, hub.addr, m), ra.Options{})

	for _, r := range ra.Reasons {
		if v := counter(t, f.reg, refusalsMetric, string(r)); v != 0 {
			t.Errorf("%s{reason=%q} = %v at start, want 0", refusalsMetric, r, v)
		}
	}

	const id = "spiffe://acme.example/ns/shop/sa/cart"
	cart := k.token(t, "shop", "cart", ra.DefaultAudience)
	bearer := "Bearer " + cart

	t.Run("a workload obtains its own identity", func(t *testing.T) {
		key := newKey()
		csr := csrFor(t, key, x509.CertificateRequest{}, id)
		resp, err := f.call(t, bearer, csr, 3600)
		if err != nil {
			t.Fatalf("CreateCertificate: %v", err)
		}
		call, sent := hub.lastCall()
		if got := call.req.GetMetadata().GetFields()[certreq.ImpersonatedIdentityKey].GetStringValue(); got != id {
			t.Errorf("hub saw ImpersonatedIdentity %q, want %q", got, id)
		}
		if call.peer != clusterID {
			t.Errorf("hub saw caller %q, want the cluster certificate %s", call.peer, clusterID)
		}
		if call.req.GetCsr() != csr || call.req.GetValidityDuration() != 3600 {
			t.Errorf("hub saw csr/validity changed (validity %d)", call.req.GetValidityDuration())
		}
		if len(call.req.GetMetadata().GetFields()) != 1 {
			t.Errorf("hub saw metadata %v, want only %s", call.req.GetMetadata(), certreq.ImpersonatedIdentityKey)
		}
		if strings.Join(resp.GetCertChain(), "|") != strings.Join(sent.GetCertChain(), "|") || len(resp.GetCertChain()) != 2 {
			t.Fatalf("RA answered %d certificates, not the hub's answer", len(resp.GetCertChain()))
		}
		block, _ := pem.Decode([]byte(resp.GetCertChain()[0]))
		leaf, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: m.ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("leaf does not verify against the mesh root: %v", err)
		}
		if len(leaf.URIs) != 1 || leaf.URIs[0].String() != id || !key.PublicKey.Equal(leaf.PublicKey) {
			t.Errorf("leaf is for %v / another key, want %s", leaf.URIs, id)
		}
		if v := counter(t, f.reg, certsMetric, ""); v != 1 {
			t.Errorf("%s = %v, want 1", certsMetric, v)
		}
	})

	// Token refusals: the API server decides; the hub is never called.
	other := k.token(t, "shop", "admin", "other-audience")
	apiDefault := k.token(t, "shop", "admin") // the API server's own audience
	k.serviceAccount(t, "shop", "gone")
	gone := k.token(t, "shop", "gone", ra.DefaultAudience)
	if err := k.admin.CoreV1().ServiceAccounts("shop").Delete(t.Context(), "gone", deleteNow); err != nil {
		t.Fatal(err)
	}
	csr := csrFor(t, newKey(), x509.CertificateRequest{}, id)
	for _, tc := range []struct {
		name, auth string
		reason     ra.Reason
		code       codes.Code
		says       []string
	}{
		{"no token", "", ra.ReasonMissingToken, codes.Unauthenticated, []string{"authorization"}},
		{"not a bearer token", "Basic " + cart, ra.ReasonMalformedToken, codes.Unauthenticated, []string{"Bearer"}},
		{"a token with a space", "Bearer " + cart[:10] + " " + cart[10:], ra.ReasonMalformedToken, codes.Unauthenticated, []string{"not allowed"}},
		{"a garbage token", "Bearer not.a.token", ra.ReasonInvalidToken, codes.Unauthenticated, []string{"did not authenticate", `"istio-ca"`}},
		{"another audience", "Bearer " + other, ra.ReasonInvalidToken, codes.Unauthenticated, []string{"did not authenticate", "audience"}},
		{"the API server's audience", "Bearer " + apiDefault, ra.ReasonInvalidToken, codes.Unauthenticated, []string{"did not authenticate"}},
		{"a deleted service account", "Bearer " + gone, ra.ReasonInvalidToken, codes.Unauthenticated, []string{"did not authenticate"}},
		// A user's (static) token is not audience-aware: the API server
		// accepts it only for its own audience, never for istio-ca.
		{"a user's token", "Bearer " + k.c.Admin.BearerToken, ra.ReasonInvalidToken, codes.Unauthenticated, []string{"did not authenticate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls, before := hub.callCount(), counter(t, f.reg, refusalsMetric, string(tc.reason))
			_, err := f.call(t, tc.auth, csr, 0)
			wantStatus(t, err, tc.code, tc.says...)
			if hub.callCount() != calls {
				t.Errorf("the hub was called")
			}
			if v := counter(t, f.reg, refusalsMetric, string(tc.reason)); v != before+1 {
				t.Errorf("%s{reason=%q} = %v, want %v", refusalsMetric, tc.reason, v, before+1)
			}
			if last := f.srv.Status().LastRefusal; last == nil || last.Reason != tc.reason {
				t.Errorf("Status().LastRefusal = %+v, want reason %s", last, tc.reason)
			}
		})
	}

	// CSR refusals: a valid token, a CSR for anything but its own identity.
	for _, tc := range []struct {
		name   string
		csr    string
		reason ra.Reason
		code   codes.Code
		says   string
	}{
		{"another service account", csrFor(t, newKey(), x509.CertificateRequest{}, "spiffe://acme.example/ns/shop/sa/admin"), ra.ReasonIdentityMismatch, codes.PermissionDenied, "not the token's identity"},
		{"another namespace", csrFor(t, newKey(), x509.CertificateRequest{}, "spiffe://acme.example/ns/bank/sa/cart"), ra.ReasonIdentityMismatch, codes.PermissionDenied, "not the token's identity"},
		{"another trust domain", csrFor(t, newKey(), x509.CertificateRequest{}, "spiffe://beta.example/ns/shop/sa/cart"), ra.ReasonIdentityMismatch, codes.PermissionDenied, "not the token's identity"},
		{"a cluster identity", csrFor(t, newKey(), x509.CertificateRequest{}, clusterID), ra.ReasonIdentityMismatch, codes.PermissionDenied, "not the token's identity"},
		{"two identities", csrFor(t, newKey(), x509.CertificateRequest{}, id, "spiffe://acme.example/ns/shop/sa/admin"), ra.ReasonIdentityMismatch, codes.PermissionDenied, "2 URI SANs"},
		{"no identity", csrFor(t, newKey(), x509.CertificateRequest{}), ra.ReasonIdentityMismatch, codes.PermissionDenied, "0 URI SANs"},
		{"a DNS name too", csrFor(t, newKey(), x509.CertificateRequest{DNSNames: []string{"kubernetes.default.svc"}}, id), ra.ReasonIdentityMismatch, codes.PermissionDenied, "DNS SAN"},
		{"an IP too", csrFor(t, newKey(), x509.CertificateRequest{IPAddresses: []net.IP{net.IPv4(10, 0, 0, 1)}}, id), ra.ReasonIdentityMismatch, codes.PermissionDenied, "IP SAN"},
		{"not a CSR", "hello", ra.ReasonInvalidCSR, codes.InvalidArgument, "csr: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls, before := hub.callCount(), counter(t, f.reg, refusalsMetric, string(tc.reason))
			_, err := f.call(t, bearer, tc.csr, 0)
			wantStatus(t, err, tc.code, tc.says)
			if hub.callCount() != calls {
				t.Errorf("the hub was called")
			}
			if v := counter(t, f.reg, refusalsMetric, string(tc.reason)); v != before+1 {
				t.Errorf("%s{reason=%q} = %v, want %v", refusalsMetric, tc.reason, v, before+1)
			}
			if last := f.srv.Status().LastRefusal; last == nil || last.Identity != id {
				t.Errorf("Status().LastRefusal = %+v, want identity %s", last, id)
			}
		})
	}

	t.Run("a hub error is passed back", func(t *testing.T) {
		hub.setErr(status.Error(codes.PermissionDenied, "cluster acme/east is revoked"))
		defer hub.setErr(nil)
		calls := hub.callCount()
		_, err := f.call(t, bearer, csr, 0)
		wantStatus(t, err, codes.PermissionDenied, "hub: cluster acme/east is revoked")
		if !strings.HasPrefix(status.Convert(err).Message(), "hub: ") {
			t.Errorf("message %q does not start with \"hub: \"", status.Convert(err).Message())
		}
		if hub.callCount() != calls+1 {
			t.Errorf("the hub was called %d times, want once", hub.callCount()-calls)
		}
		if v := counter(t, f.reg, refusalsMetric, string(ra.ReasonHubError)); v != 1 {
			t.Errorf("%s{reason=hub_error} = %v, want 1", refusalsMetric, v)
		}
	})

	// An RA configured for the API server's own audience: tokens for it
	// work, and a user's token authenticates, as someone who is not a
	// workload.
	t.Run("an RA for the API server's audience", func(t *testing.T) {
		f2 := startRA(t, m, ra.KubeReviewer(k.spoke), dialHub(t, hub.addr, m), ra.Options{Audiences: []string{apiServerAudience}})
		const admin = "spiffe://acme.example/ns/shop/sa/admin"
		if _, err := f2.call(t, "Bearer "+apiDefault, csrFor(t, newKey(), x509.CertificateRequest{}, admin), 0); err != nil {
			t.Errorf("shop/admin with a token for %s: %v", apiServerAudience, err)
		} else if call, _ := hub.lastCall(); call.req.GetMetadata().GetFields()[certreq.ImpersonatedIdentityKey].GetStringValue() != admin {
			t.Errorf("hub saw %v, want %s", call.req.GetMetadata(), admin)
		}
		_, err := f2.call(t, "Bearer "+k.c.Admin.BearerToken, csrFor(t, newKey(), x509.CertificateRequest{}, admin), 0)
		wantStatus(t, err, codes.Unauthenticated, `user "kubetest-admin" is not a service account`)
		if v := counter(t, f2.reg, refusalsMetric, string(ra.ReasonNotServiceAccount)); v != 1 {
			t.Errorf("%s{reason=not_service_account} = %v, want 1", refusalsMetric, v)
		}
		_, err = f2.call(t, bearer, csrFor(t, newKey(), x509.CertificateRequest{}, id), 0)
		wantStatus(t, err, codes.Unauthenticated, "did not authenticate")
	})

	t.Run("status and audit log", func(t *testing.T) {
		st := f.srv.Status()
		if st.Certificates != 1 || st.Refusals[ra.ReasonInvalidToken] != 5 || st.Refusals[ra.ReasonIdentityMismatch] != 8 ||
			st.Refusals[ra.ReasonHubError] != 1 || len(st.Refusals) != len(ra.Reasons) {
			t.Errorf("Status() = %+v", st)
		}
		if st.LastRefusal == nil || st.LastRefusal.Reason != ra.ReasonHubError || st.LastRefusal.Time.IsZero() {
			t.Errorf("LastRefusal = %+v", st.LastRefusal)
		}
		logs := f.logs.String()
		if n := strings.Count(logs, `"msg":"workload certificate refused"`); n != 18 {
			t.Errorf("%d audit lines for refusals, want 18", n)
		}
		for _, tok := range []string{cart, other, gone, k.c.Admin.BearerToken} {
			if strings.Contains(logs, tok) {
				t.Errorf("the log holds a token")
			}
		}
		if !strings.Contains(logs, `"msg":"workload certificate obtained"`) || !strings.Contains(logs, `"identity":"`+id+`"`) {
			t.Errorf("no audit line for the issued certificate")
		}
	})
}

// An API server that cannot be reached: Unavailable, nothing reaches the
// hub.
func TestReviewUnavailable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "https://" + addr, BearerToken: "x",
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	m := newMesh()
	hub := startFakeHub(t, m)
	f := startRA(t, m, ra.KubeReviewer(cs), dialHub(t, hub.addr, m), ra.Options{})
	_, err = f.call(t, "Bearer abc.def.ghi", csrFor(t, newKey(), x509.CertificateRequest{}, "spiffe://acme.example/ns/shop/sa/cart"), 0)
	wantStatus(t, err, codes.Unavailable, "cannot check the token", "connection refused")
	if hub.callCount() != 0 {
		t.Errorf("the hub was called")
	}
	if v := counter(t, f.reg, refusalsMetric, string(ra.ReasonReviewUnavailable)); v != 1 {
		t.Errorf("%s{reason=review_unavailable} = %v, want 1", refusalsMetric, v)
	}
}
