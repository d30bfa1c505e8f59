package ca

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	pb "istio.io/api/security/v1alpha1"

	"github.com/navemesh/nave/shared/certreq"
	"github.com/navemesh/nave/shared/certreq/certreqtest"
)

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// caFixture is a hub CA serving CreateCertificate over mutual TLS on
// 127.0.0.1, with meshes m1 and m2.
type caFixture struct {
	a       *Authority
	addr    string
	serving *x509.CertPool // verifies the server's certificate
	logs    *syncBuffer
}

func newCAFixture(t *testing.T) *caFixture {
	t.Helper()
	logs := &syncBuffer{}
	a := newAuthority(t, t.TempDir(), Options{Registerer: prometheus.NewPedanticRegistry(),
		Logger: slog.New(slog.NewTextHandler(logs, nil))}, mesh1, mesh2)

	// The hub's serving certificate comes from a CA of its own.
	servingCA := newTestCA(t, "hub serving CA", nil)
	key := certreqtest.ECKey(t)
	cert := servingCA.leaf(t, key, &x509.Certificate{IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	tlsCfg := &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{cert.Raw}, PrivateKey: key}},
		ClientAuth:   tls.RequestClientCert, // PeerCertificateAuthorizer verifies, per mesh
		MinVersion:   tls.VersionTLS12,
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(tlsCfg)))
	NewServer(a, PeerCertificateAuthorizer{Authority: a}, ServerOptions{Logger: slog.New(slog.NewTextHandler(logs, nil))}).Register(gs)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)

	pool := x509.NewCertPool()
	pool.AddCert(servingCA.cert)
	return &caFixture{a: a, addr: lis.Addr().String(), serving: pool, logs: logs}
}

// client returns a CA client presenting cert (none if nil).
func (f *caFixture) client(t *testing.T, cert *tls.Certificate) pb.IstioCertificateServiceClient {
	t.Helper()
	cfg := &tls.Config{RootCAs: f.serving, MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	conn, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return pb.NewIstioCertificateServiceClient(conn)
}

// workloadCert has the fixture's CA issue a certificate for id, as a
// workload would hold it.
func (f *caFixture) workloadCert(t *testing.T, mesh string, id string) *tls.Certificate {
	t.Helper()
	key := certreqtest.ECKey(t)
	chainPEM, err := f.a.Sign(ctx, mesh, certreqtest.New(t, key, certreqtest.Template{URIs: []string{id}}), SignOptions{Identities: []ID{mustID(t, id)}})
	if err != nil {
		t.Fatal(err)
	}
	return tlsCert(parseChain(t, chainPEM), key)
}

func tlsCert(chain []*x509.Certificate, key crypto.Signer) *tls.Certificate {
	c := &tls.Certificate{PrivateKey: key}
	for _, x := range chain {
		c.Certificate = append(c.Certificate, x.Raw)
	}
	return c
}

func wantCode(t *testing.T, err error, code codes.Code, says string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("got %v, want code %s", err, code)
	}
	if !strings.Contains(status.Convert(err).Message(), says) {
		t.Errorf("message %q does not say %q", status.Convert(err).Message(), says)
	}
}

func TestServerRenewsOwnIdentity(t *testing.T) {
	f := newCAFixture(t)
	c := f.client(t, f.workloadCert(t, "m1", uriA))

	key := certreqtest.ECKey(t)
	resp, err := c.CreateCertificate(ctx, &pb.IstioCertificateRequest{
		Csr: string(certreqtest.New(t, key, certreqtest.Template{URIs: []string{uriA}})), ValidityDuration: 3600})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.CertChain) != 2 {
		t.Fatalf("cert_chain of %d entries, want leaf and root", len(resp.CertChain))
	}
	var chain []*x509.Certificate
	for i, entry := range resp.CertChain {
		certs := parseChain(t, []byte(entry))
		if len(certs) != 1 {
			t.Fatalf("cert_chain[%d] holds %d certificates, want 1", i, len(certs))
		}
		chain = append(chain, certs[0])
	}
	roots, _ := f.a.Roots("m1")
	verifyLeaf(t, chain, roots, time.Now())
	rootPEM, _ := f.a.RootsPEM("m1")
	if resp.CertChain[len(resp.CertChain)-1] != string(rootPEM) {
		t.Error("the last entry is not the mesh's root")
	}
	leaf := chain[0]
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != uriA {
		t.Errorf("URI SANs %v, want %s", leaf.URIs, uriA)
	}
	if !publicKeyMatches(leaf, key) {
		t.Error("the certificate is not for the CSR's key")
	}
	if life := leaf.NotAfter.Sub(leaf.NotBefore); life != time.Hour+leafBackdate {
		t.Errorf("lifetime %s, want the requested hour", life)
	}
	// The renewed certificate renews again.
	again := f.client(t, tlsCert(chain, key))
	if _, err := again.CreateCertificate(ctx, &pb.IstioCertificateRequest{Csr: string(certreqtest.For(t, uriA))}); err != nil {
		t.Fatalf("renewing with the renewed certificate: %v", err)
	}
	if got := testutil.ToFloat64(f.a.metrics.issued); got != 3 {
		t.Errorf("issued %v, want 3 (the fixture's and two renewals)", got)
	}
}

func TestServerRefusals(t *testing.T) {
	f := newCAFixture(t)
	m1 := f.client(t, f.workloadCert(t, "m1", uriA))

	// A certificate from a CA nave does not know, claiming an m1 identity.
	stranger := newTestCA(t, "stranger", nil)
	sKey := certreqtest.ECKey(t)
	strangerCert := stranger.leaf(t, sKey, &x509.Certificate{URIs: []*url.URL{mustURL(t, uriA)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})

	// A certificate that m1's CA signed, claiming m2's trust domain.
	m1CA := f.a.meshes["m1"]
	xKey := certreqtest.ECKey(t)
	crossCert := (&testCA{cert: m1CA.path[0], key: nil}).leafWith(t, m1CA.signer, xKey, &x509.Certificate{
		URIs: []*url.URL{mustURL(t, "spiffe://m2.example/ns/a/sa/b")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})

	rsa1024, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		client pb.IstioCertificateServiceClient
		req    *pb.IstioCertificateRequest
		code   codes.Code
		says   string
	}{
		{"mesh A workload asks for mesh B identity", m1,
			&pb.IstioCertificateRequest{Csr: string(certreqtest.For(t, "spiffe://m2.example/ns/a/sa/b"))},
			codes.PermissionDenied, `trust domain "m2.example" is not mesh "m1"'s ("m1.example")`},
		{"workload asks for another service account", m1,
			&pb.IstioCertificateRequest{Csr: string(certreqtest.For(t, "spiffe://m1.example/ns/a/sa/admin"))},
			codes.PermissionDenied, "not an identity this caller may obtain"},
		{"workload asks for another namespace", m1,
			&pb.IstioCertificateRequest{Csr: string(certreqtest.For(t, "spiffe://m1.example/ns/kube-system/sa/b"))},
			codes.PermissionDenied, "not an identity this caller may obtain"},
		{"client certificate from another CA", f.client(t, tlsCert([]*x509.Certificate{strangerCert}, sKey)),
			&pb.IstioCertificateRequest{Csr: string(certreqtest.For(t, uriA))},
			codes.Unauthenticated, `does not verify against mesh "m1"'s root`},
		{"mesh A certificate claiming mesh B", f.client(t, tlsCert([]*x509.Certificate{crossCert}, xKey)),
			&pb.IstioCertificateRequest{Csr: string(certreqtest.For(t, "spiffe://m2.example/ns/a/sa/b"))},
			codes.Unauthenticated, `does not verify against mesh "m2"'s root`},
		{"no client certificate", f.client(t, nil),
			&pb.IstioCertificateRequest{Csr: string(certreqtest.For(t, uriA))},
			codes.Unauthenticated, "no client certificate"},
		{"garbage CSR", m1, &pb.IstioCertificateRequest{Csr: "garbage"}, codes.InvalidArgument, "csr: does not start with a PEM block"},
		{"oversized CSR", m1, &pb.IstioCertificateRequest{Csr: strings.Repeat("A", certreq.MaxSize+1)}, codes.InvalidArgument, "larger than"},
		{"weak key", m1, &pb.IstioCertificateRequest{Csr: string(certreqtest.New(t, rsa1024, certreqtest.Template{URIs: []string{uriA}}))},
			codes.InvalidArgument, "RSA key of 1024 bits"},
		{"negative validity", m1, &pb.IstioCertificateRequest{Csr: string(certreqtest.For(t, uriA)), ValidityDuration: -5},
			codes.InvalidArgument, "negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := tc.client.CreateCertificate(ctx, tc.req)
			if resp != nil {
				t.Error("got a response with the refusal")
			}
			wantCode(t, err, tc.code, tc.says)
		})
	}

	for r, want := range map[certreq.Reason]float64{certreq.ReasonIdentityNotAllowed: 3, certreq.ReasonUnauthenticated: 3,
		certreq.ReasonInvalidCSR: 2, certreq.ReasonKeyNotAllowed: 1, certreq.ReasonInvalidRequest: 1} {
		if got := testutil.ToFloat64(f.a.metrics.refusals.WithLabelValues(string(r))); got != want {
			t.Errorf("refusals{reason=%s} = %v, want %v", r, got, want)
		}
	}
	if got := testutil.ToFloat64(f.a.metrics.issued); got != 1 {
		t.Errorf("issued %v, want only the fixture's", got)
	}
	logs := f.logs.String()
	if n := strings.Count(logs, `msg="certificate refused"`); n != 10 {
		t.Errorf("%d refusal log lines, want 10:\n%s", n, logs)
	}
	for _, want := range []string{"reason=unauthenticated", "reason=identity_not_allowed caller=" + uriA + " mesh=m1", "peer=127.0.0.1:"} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs do not say %q:\n%s", want, logs)
		}
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// leafWith issues a leaf under c's certificate, signed by signer.
func (c *testCA) leafWith(t *testing.T, signer crypto.Signer, key crypto.Signer, tmpl *x509.Certificate) *x509.Certificate {
	t.Helper()
	tmpl.SerialNumber = nextSerial()
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, key.Public(), signer)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// TestPeerCertificateAuthorizer covers the cases a TLS client cannot
// easily produce.
func TestPeerCertificateAuthorizer(t *testing.T) {
	now := time.Now()
	a := newAuthority(t, t.TempDir(), Options{Now: func() time.Time { return now }}, mesh1)
	authz := PeerCertificateAuthorizer{Authority: a}
	m1CA := &testCA{cert: a.meshes["m1"].path[0]}
	signer := a.meshes["m1"].signer
	leaf := func(tmpl *x509.Certificate) *x509.Certificate {
		if tmpl.ExtKeyUsage == nil {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		}
		return m1CA.leafWith(t, signer, certreqtest.ECKey(t), tmpl)
	}
	tlsPeer := func(certs ...*x509.Certificate) *peer.Peer {
		return &peer.Peer{AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: certs}}}
	}
	good := leaf(&x509.Certificate{URIs: []*url.URL{mustURL(t, uriA)}})

	g, err := authz.Authorize(peer.NewContext(ctx, tlsPeer(good)))
	if err != nil {
		t.Fatal(err)
	}
	if g.Mesh != "m1" || len(g.Identities) != 1 || g.Identities[0] != mustID(t, uriA) || g.Caller != uriA {
		t.Errorf("grant %+v", g)
	}

	for _, tc := range []struct {
		name string
		peer *peer.Peer
		says string
	}{
		{"no peer", nil, "no transport credentials"},
		{"not TLS", &peer.Peer{AuthInfo: insecureInfo{}}, "connection is insecure, not TLS"},
		{"two URIs", tlsPeer(leaf(&x509.Certificate{URIs: []*url.URL{mustURL(t, uriA), mustURL(t, "spiffe://m1.example/ns/a/sa/c")}})), "has 2 URI SANs"},
		{"no URI", tlsPeer(leaf(&x509.Certificate{Subject: pkix.Name{CommonName: "x"}})), "has 0 URI SANs"},
		{"spoke identity", tlsPeer(leaf(&x509.Certificate{URIs: []*url.URL{mustURL(t, "spiffe://m1.example/nave/cluster/c1")}})), "is not /ns/"},
		{"unknown trust domain", tlsPeer(leaf(&x509.Certificate{URIs: []*url.URL{mustURL(t, "spiffe://m9.example/ns/a/sa/b")}})), `trust domain "m9.example" is no mesh's`},
		{"server-only certificate", tlsPeer(leaf(&x509.Certificate{URIs: []*url.URL{mustURL(t, uriA)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})), "does not verify"},
		{"CA certificate", tlsPeer(a.meshes["m1"].path[0]), "is a CA certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ctx
			if tc.peer != nil {
				c = peer.NewContext(ctx, tc.peer)
			}
			_, err := authz.Authorize(c)
			wantRefusal(t, err, certreq.ReasonUnauthenticated, tc.says)
		})
	}

	// Expired: the same good certificate, two hours later.
	now = now.Add(2 * time.Hour)
	_, err = authz.Authorize(peer.NewContext(ctx, tlsPeer(good)))
	wantRefusal(t, err, certreq.ReasonUnauthenticated, "expired")
}

type insecureInfo struct{}

func (insecureInfo) AuthType() string { return "insecure" }

// TestServerAuthorizerErrors: how a custom Authorizer's errors become
// codes, and that the request never widens a grant.
func TestServerAuthorizerErrors(t *testing.T) {
	a := newAuthority(t, t.TempDir(), Options{}, mesh1)
	for _, tc := range []struct {
		err  error
		code codes.Code
	}{
		{errors.New("who are you"), codes.Unauthenticated},
		{status.Error(codes.PermissionDenied, "no"), codes.PermissionDenied},
		{status.Error(codes.Unavailable, "token review down"), codes.Unavailable},
		{certreq.Refuse(certreq.ReasonIdentityNotAllowed, "no"), codes.PermissionDenied},
	} {
		s := NewServer(a, AuthorizerFunc(func(context.Context) (Grant, error) { return Grant{}, tc.err }), ServerOptions{})
		_, err := s.CreateCertificate(ctx, &pb.IstioCertificateRequest{Csr: string(certreqtest.For(t, uriA))})
		if status.Code(err) != tc.code {
			t.Errorf("authorizer error %v: got %v, want %s", tc.err, err, tc.code)
		}
		if msg := status.Convert(err).Message(); strings.Contains(msg, "rpc error") {
			t.Errorf("authorizer error %v: message %q nests a status", tc.err, msg)
		}
	}

	// The grant is for mesh m9, which has no CA.
	s := NewServer(a, AuthorizerFunc(func(context.Context) (Grant, error) {
		return Grant{Mesh: "m9", Identities: []ID{mustID(t, uriA)}}, nil
	}), ServerOptions{})
	_, err := s.CreateCertificate(ctx, &pb.IstioCertificateRequest{Csr: string(certreqtest.For(t, uriA))})
	wantCode(t, err, codes.FailedPrecondition, `mesh "m9" has no CA loaded`)

	// Over a connection without TLS, the peer authorizer refuses.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	NewServer(a, PeerCertificateAuthorizer{Authority: a}, ServerOptions{}).Register(gs)
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = pb.NewIstioCertificateServiceClient(conn).CreateCertificate(ctx, &pb.IstioCertificateRequest{Csr: string(certreqtest.For(t, uriA))})
	wantCode(t, err, codes.Unauthenticated, "no transport credentials")
}

func TestSecondsToDuration(t *testing.T) {
	for in, want := range map[int64]time.Duration{0: 0, 60: time.Minute, 1 << 62: 1<<63 - 1, -(1 << 62): -1 << 63} {
		if got := secondsToDuration(in); got != want {
			t.Errorf("secondsToDuration(%d) = %d, want %d", in, got, want)
		}
	}
}
