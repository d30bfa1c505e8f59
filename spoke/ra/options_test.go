package ra_test

import (
	"context"
	"crypto/x509"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	pb "istio.io/api/security/v1alpha1"

	"github.com/navemesh/nave/spoke/ra"
)

// stubReviewer answers every review with its Review. The API server always
// fills in audiences; these tests cover reviewers that may not.
type stubReviewer struct{ r ra.Review }

func (s stubReviewer) Review(context.Context, string, []string) (ra.Review, error) { return s.r, nil }

// countingHub counts calls and answers with a fixed chain.
type countingHub struct{ calls int }

func (h *countingHub) CreateCertificate(context.Context, *pb.IstioCertificateRequest, ...grpc.CallOption) (*pb.IstioCertificateResponse, error) {
	h.calls++
	return &pb.IstioCertificateResponse{CertChain: []string{"leaf", "root"}}, nil
}

// The token must be valid for one of the RA's audiences: a reviewer that
// authenticates it for others, or without saying for which, is not enough.
func TestAudiences(t *testing.T) {
	const id = "spiffe://acme.example/ns/shop/sa/cart"
	csr := csrFor(t, newKey(), x509.CertificateRequest{}, id)
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer tok"))
	for _, tc := range []struct {
		name      string
		audiences []string
		code      codes.Code
	}{
		{"ours", []string{"istio-ca"}, codes.OK},
		{"ours among others", []string{"other", "nave"}, codes.OK},
		{"others only", []string{"other"}, codes.Unauthenticated},
		{"none said", nil, codes.Unauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hub := &countingHub{}
			srv, err := ra.New(ra.Options{TrustDomain: trustDomain, Audiences: []string{"istio-ca", "nave"}, Hub: hub,
				Reviewer: stubReviewer{ra.Review{Authenticated: true, Username: "system:serviceaccount:shop:cart", Audiences: tc.audiences}}})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := srv.CreateCertificate(ctx, &pb.IstioCertificateRequest{Csr: csr})
			if tc.code == codes.OK {
				if err != nil || hub.calls != 1 || strings.Join(resp.GetCertChain(), ",") != "leaf,root" {
					t.Errorf("got %v, %v after %d hub calls; want the hub's answer", resp, err, hub.calls)
				}
				return
			}
			wantStatus(t, err, tc.code, "none of")
			if hub.calls != 0 || srv.Status().Refusals[ra.ReasonWrongAudience] != 1 {
				t.Errorf("hub called %d times; status %+v", hub.calls, srv.Status())
			}
		})
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	hub, rev := &countingHub{}, stubReviewer{}
	for _, tc := range []struct {
		name string
		opts ra.Options
		says string
	}{
		{"no reviewer", ra.Options{Hub: hub, TrustDomain: trustDomain}, "TokenReviewer"},
		{"no hub", ra.Options{Reviewer: rev, TrustDomain: trustDomain}, "hub"},
		{"no trust domain", ra.Options{Reviewer: rev, Hub: hub}, "trust domain"},
		{"a bad trust domain", ra.Options{Reviewer: rev, Hub: hub, TrustDomain: "Acme_Example"}, "trust domain"},
		{"empty audiences", ra.Options{Reviewer: rev, Hub: hub, TrustDomain: trustDomain, Audiences: []string{}}, "audiences"},
		{"an empty audience", ra.Options{Reviewer: rev, Hub: hub, TrustDomain: trustDomain, Audiences: []string{""}}, "audiences"},
	} {
		if _, err := ra.New(tc.opts); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: New = %v, want an error about %s", tc.name, err, tc.says)
		}
	}
	srv, err := ra.New(ra.Options{Reviewer: rev, Hub: hub, TrustDomain: trustDomain})
	if err != nil {
		t.Fatal(err)
	}
	if st := srv.Status(); len(st.Audiences) != 1 || st.Audiences[0] != ra.DefaultAudience || len(st.Refusals) != len(ra.Reasons) || st.LastRefusal != nil {
		t.Errorf("Status() of a new RA = %+v", st)
	}
}
