package enroll_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/navemesh/nave/hub/enroll"
	"github.com/navemesh/nave/hub/enroll/enrolltest"
	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/internal/x509test"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/spiffeid"
)

func TestEnrollIssuesACertificateBoundToTheCluster(t *testing.T) {
	h := enrolltest.StartHub(t, enrolltest.HubOptions{})
	tok := newToken(t, h, enrolltest.MeshA, "east")
	e := enrollCall(t, h, tok)
	if e.err != nil {
		t.Fatal(e.err, h.Logs())
	}
	if e.resp.GetMesh() != enrolltest.MeshA || e.resp.GetCluster() != "east" {
		t.Errorf("response names %s/%s", e.resp.GetMesh(), e.resp.GetCluster())
	}
	leaf := e.cert.Leaf
	want, _ := spiffeid.Cluster(enrolltest.TrustDomainA, "east")
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != want.String() {
		t.Errorf("certificate URIs %v, want [%s]", leaf.URIs, want)
	}
	bundle := x509.NewCertPool()
	if !bundle.AppendCertsFromPEM(e.resp.GetTrustBundlePem()) {
		t.Fatal("trust bundle holds no certificate")
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: bundle, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("certificate does not verify against the trust bundle: %v", err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: h.CA.Authority(enrolltest.MeshB).Pool(),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("certificate verifies against another mesh's root")
	}
	rec, err := h.Store.Cluster(t.Context(), enrolltest.MeshA, "east")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Serial != leaf.SerialNumber.Text(16) || !rec.NotAfter.Equal(leaf.NotAfter) || rec.TrustDomain != enrolltest.TrustDomainA {
		t.Errorf("record %+v does not describe the certificate (serial %x)", rec, leaf.SerialNumber)
	}
	if got := h.Counter(t, "nave_hub_enroll_enrollments_total", ""); got != 1 {
		t.Errorf("enrollments counted: %v, want 1", got)
	}

	// The certificate is the spoke's identity on the Sync service.
	if _, err := openPush(t, h, &e.cert); err != nil {
		t.Fatalf("push stream with the enrolled certificate: %v", err)
	}
	st := h.Ingest.Status()
	if len(st) != 1 || st[0].ClusterIdentity != (ingest.ClusterIdentity{Mesh: enrolltest.MeshA, Cluster: "east"}) || !st[0].Connected {
		t.Errorf("ingest status %+v, want acme/east connected", st)
	}

	// And it renews.
	r, err := renewCall(t, h, e.cert)
	if err != nil {
		t.Fatalf("renew: %v", err)
	}
	block, _ := pem.Decode(r.GetCertChainPem())
	renewed, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if renewed.URIs[0].String() != want.String() || renewed.SerialNumber.Cmp(leaf.SerialNumber) == 0 {
		t.Errorf("renewed certificate %v serial %x", renewed.URIs, renewed.SerialNumber)
	}
	rec2, _ := h.Store.Cluster(t.Context(), enrolltest.MeshA, "east")
	if rec2.Serial != renewed.SerialNumber.Text(16) || rec2.RenewedAt.IsZero() || !rec2.EnrolledAt.Equal(rec.EnrolledAt) {
		t.Errorf("record after renewal %+v", rec2)
	}
	if got := h.Counter(t, "nave_hub_enroll_renewals_total", ""); got != 1 {
		t.Errorf("renewals counted: %v, want 1", got)
	}
	if strings.Contains(h.Logs(), tok[strings.LastIndex(tok, ".")+1:]) {
		t.Error("the hub logged the token secret")
	}
}

// TestTokenAttacksAreRefused tries every kind of bad token against the
// Enrollment service: each is refused as Unauthenticated with its reason,
// counted, logged, and changes nothing.
func TestTokenAttacksAreRefused(t *testing.T) {
	clk := newClock()
	h := enrolltest.StartHub(t, enrolltest.HubOptions{Now: clk.Now})
	used := newToken(t, h, enrolltest.MeshA, "east")
	if e := enrollCall(t, h, used); e.err != nil {
		t.Fatal(e.err)
	}
	expired, _, err := h.Store.CreateToken(t.Context(), enrolltest.MeshA, "west", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	live, liveInfo, err := h.Store.CreateToken(t.Context(), enrolltest.MeshA, "north", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	randomSecret := "q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80"

	tokensBefore, _ := h.Store.ListTokens(t.Context())
	clustersBefore, _ := h.Store.Clusters(t.Context())
	for _, c := range []struct {
		name, token, reason, msg string
	}{
		{"reused", used, "used_token", "already used"},
		{"expired", expired, "expired_token", "expired"},
		{"forged secret for a real id", "nave-join." + liveInfo.ID + "." + randomSecret, "invalid_token", "does not match"},
		{"random id", "nave-join.fedcba9876543210." + randomSecret, "unknown_token", "unknown"},
		{"empty", "", "malformed_token", "malformed"},
		{"not a token", "hello", "malformed_token", "malformed"},
		{"live token with a trailing newline", live + "\n", "malformed_token", "malformed"},
		{"live token's secret alone", live[strings.LastIndex(live, ".")+1:], "malformed_token", "malformed"},
		{"kubeadm-style token", "abcdef.0123456789abcdef", "malformed_token", "malformed"},
	} {
		before := h.Counter(t, "nave_hub_enroll_refusals_total", c.reason)
		e := enrollCall(t, h, c.token)
		wantStatus(t, c.name, e.err, codes.Unauthenticated, c.msg)
		if got := h.Counter(t, "nave_hub_enroll_refusals_total", c.reason); got != before+1 {
			t.Errorf("%s: refusals{reason=%s} went from %v to %v", c.name, c.reason, before, got)
		}
		if !strings.Contains(h.Logs(), `"reason":"`+c.reason+`"`) {
			t.Errorf("%s: no audit line with reason %s", c.name, c.reason)
		}
	}
	tokensAfter, _ := h.Store.ListTokens(t.Context())
	clustersAfter, _ := h.Store.Clusters(t.Context())
	if !reflect.DeepEqual(tokensBefore, tokensAfter) || !reflect.DeepEqual(clustersBefore, clustersAfter) {
		t.Errorf("refused enrollments changed the store:\ntokens %+v\n    -> %+v\nclusters %+v\n      -> %+v",
			tokensBefore, tokensAfter, clustersBefore, clustersAfter)
	}
	if got := h.Counter(t, "nave_hub_enroll_enrollments_total", ""); got != 1 {
		t.Errorf("enrollments counted: %v, want only the first", got)
	}
	for _, secret := range []string{used, expired, live} {
		if strings.Contains(h.Logs(), secret[strings.LastIndex(secret, ".")+1:]) {
			t.Error("the hub logged a token secret")
		}
	}
	// The live token survived the forgery attempt.
	if e := enrollCall(t, h, live); e.err != nil {
		t.Fatalf("live token after the attacks: %v", e.err)
	}
}

func TestConcurrentEnrollsWithOneTokenOneWins(t *testing.T) {
	ca := enrolltest.NewCA()
	ca.AddMesh(enrolltest.MeshA, enrolltest.TrustDomainA)
	dir := t.TempDir()
	// Two hub replicas sharing the state dir and the CA.
	hubs := []*enrolltest.Hub{
		enrolltest.StartHubWithCA(t, ca, enrolltest.HubOptions{Dir: dir}),
		enrolltest.StartHubWithCA(t, ca, enrolltest.HubOptions{Dir: dir}),
	}
	tok := newToken(t, hubs[0], enrolltest.MeshA, "east")
	var wg sync.WaitGroup
	results := make([]enrollment, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = enrollCall(t, hubs[i%2], tok)
		}()
	}
	wg.Wait()
	wins := 0
	for i, r := range results {
		if r.err == nil {
			wins++
			continue
		}
		wantStatus(t, "losing enroll "+string(rune('0'+i)), r.err, codes.Unauthenticated, "already used")
	}
	if wins != 1 {
		t.Fatalf("%d concurrent enrollments with one token succeeded, want 1", wins)
	}
}

func TestBadCSRIsRefusedWithoutSpendingTheToken(t *testing.T) {
	h := enrolltest.StartHub(t, enrolltest.HubOptions{})
	tok := newToken(t, h, enrolltest.MeshA, "east")
	_, good := newCSR(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	client := protocolv1.NewEnrollmentClient(h.Dial(t, nil))
	// A CSR whose signature does not verify: the last byte of the DER is
	// the signature's.
	block, _ := pem.Decode(good)
	block.Bytes[len(block.Bytes)-1] ^= 0x01
	tampered := pem.EncodeToMemory(block)
	block.Bytes[len(block.Bytes)-1] ^= 0x01
	for name, csr := range map[string][]byte{
		"empty":          nil,
		"not PEM":        []byte("hello"),
		"a certificate":  h.CA.Authority(enrolltest.MeshA).PEM(),
		"trailing data":  append(append([]byte{}, good...), []byte("-----BEGIN X-----\nAA==\n-----END X-----\n")...),
		"tampered":       tampered,
		"far too large":  make([]byte, 64<<10),
		"two CSRs glued": append(append([]byte{}, good...), good...),
	} {
		_, err := client.Enroll(ctx, &protocolv1.EnrollRequest{Token: tok, CsrPem: csr})
		wantStatus(t, name, err, codes.InvalidArgument, "certificate request")
	}
	if got := h.Counter(t, "nave_hub_enroll_refusals_total", "bad_csr"); got != 7 {
		t.Errorf("refusals{reason=bad_csr} = %v, want 7", got)
	}
	if e := enrollCall(t, h, tok); e.err != nil {
		t.Fatalf("the token after bad CSRs: %v", e.err)
	}
}

func TestRevokedClusterCannotEnrollOrRenew(t *testing.T) {
	h := enrolltest.StartHub(t, enrolltest.HubOptions{})
	cert := enrolled(t, h, enrolltest.MeshA, "east")
	pending := newToken(t, h, enrolltest.MeshA, "east") // made before the revocation
	rec, _ := h.Store.Cluster(t.Context(), enrolltest.MeshA, "east")

	// navectl, another process, revokes through its own store.
	navectl, err := enroll.OpenDir(h.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := navectl.Revoke(t.Context(), enrolltest.MeshA, "east"); err != nil {
		t.Fatal(err)
	}

	_, err = renewCall(t, h, cert)
	wantStatus(t, "renew of a revoked cluster", err, codes.PermissionDenied, "revoked")
	e := enrollCall(t, h, pending)
	wantStatus(t, "enroll of a revoked cluster", e.err, codes.PermissionDenied, "revoked")
	if got, _ := h.Store.Cluster(t.Context(), enrolltest.MeshA, "east"); !reflect.DeepEqual(got, rec) {
		t.Errorf("refusals changed the record: %+v -> %+v", rec, got)
	}
	if got := h.Counter(t, "nave_hub_enroll_refusals_total", "revoked"); got != 2 {
		t.Errorf("refusals{reason=revoked} = %v, want 2", got)
	}
	if got := h.Counter(t, "nave_hub_spoke_auth_refusals_total", "revoked"); got != 1 {
		t.Errorf("auth refusals{reason=revoked} = %v, want 1", got)
	}
	if got := h.Counter(t, "nave_hub_enroll_renewals_total", ""); got != 0 {
		t.Errorf("renewals counted: %v", got)
	}
}

// A mesh the hub no longer serves (deleted) gets no enrollment, renewal
// or stream; the other mesh is served as before.
func TestMeshNotHostedIsRefused(t *testing.T) {
	var deleted atomic.Bool
	h := enrolltest.StartHub(t, enrolltest.HubOptions{Hosted: func(mesh string) bool {
		return mesh != enrolltest.MeshA || !deleted.Load()
	}})
	cert := enrolled(t, h, enrolltest.MeshA, "east")
	pending := newToken(t, h, enrolltest.MeshA, "west")
	other := enrolled(t, h, enrolltest.MeshB, "east")
	deleted.Store(true)

	e := enrollCall(t, h, pending)
	wantStatus(t, "enroll into a deleted mesh", e.err, codes.PermissionDenied, "not a mesh of this hub")
	_, err := renewCall(t, h, cert)
	wantStatus(t, "renew in a deleted mesh", err, codes.PermissionDenied, "not a mesh of this hub")
	if _, err := openPush(t, h, &cert); err == nil {
		t.Error("a push stream of a deleted mesh's cluster was opened")
	} else {
		wantStatus(t, "push of a deleted mesh's cluster", err, codes.PermissionDenied, "not a mesh of this hub")
	}
	if _, err := renewCall(t, h, other); err != nil {
		t.Errorf("renew in the other mesh: %v", err)
	}
	if got := h.Counter(t, "nave_hub_enroll_refusals_total", "mesh_not_hosted"); got != 1 {
		t.Errorf("refusals{reason=mesh_not_hosted} = %v, want 1", got)
	}
	if got := h.Counter(t, "nave_hub_spoke_auth_refusals_total", "mesh_not_hosted"); got != 2 {
		t.Errorf("auth refusals{reason=mesh_not_hosted} = %v, want 2", got)
	}
}

func TestRevocationClosesTheOpenStreamAtOnce(t *testing.T) {
	h := enrolltest.StartHub(t, enrolltest.HubOptions{})
	east := enrolled(t, h, enrolltest.MeshA, "east")
	west := enrolled(t, h, enrolltest.MeshA, "west")
	pEast, err := openPush(t, h, &east)
	if err != nil {
		t.Fatal(err)
	}
	pWest, err := openPush(t, h, &west)
	if err != nil {
		t.Fatal(err)
	}

	navectl, err := enroll.OpenDir(h.Dir)
	if err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	if err := navectl.Revoke(t.Context(), enrolltest.MeshA, "east"); err != nil {
		t.Fatal(err)
	}
	err = pEast.ended(t)
	wantStatus(t, "revoked cluster's open stream", err, codes.PermissionDenied, "acme/east is revoked")
	t.Logf("stream closed %v after the revocation was written", time.Since(revoked))
	// The enforcer counts after withdraw returns, which may be after the
	// client saw its stream end: wait a little for the count.
	testwait.Until(t, "the revoked stream counted", func() bool {
		return h.Counter(t, "nave_hub_enroll_revoked_streams_closed_total", "") >= 1
	})
	if got := h.Counter(t, "nave_hub_enroll_revoked_streams_closed_total", ""); got != 1 {
		t.Errorf("revoked streams closed: %v, want 1", got)
	}
	// It cannot come back; the other cluster is untouched.
	_, err = openPush(t, h, &east)
	wantStatus(t, "revoked cluster reconnecting", err, codes.PermissionDenied, "revoked")
	select {
	case <-pWest.done:
		t.Fatalf("another cluster's stream ended: %v", pWest.err)
	default:
	}
	if err := pWest.stream.Send(syncedMarker("2")); err != nil {
		t.Fatalf("other cluster's stream: %v", err)
	}
}

// TestCertificateAttacksAreRefused presents certificates that must not
// authenticate, on Push and on Renew; each is refused with its reason and
// changes nothing.
func TestCertificateAttacksAreRefused(t *testing.T) {
	h := enrolltest.StartHub(t, enrolltest.HubOptions{})
	enrolled(t, h, enrolltest.MeshA, "east")
	enrolled(t, h, enrolltest.MeshB, "east")
	rogue := x509test.NewAuthority("rogue")
	idA, _ := spiffeid.Cluster(enrolltest.TrustDomainA, "east")
	idB, _ := spiffeid.Cluster(enrolltest.TrustDomainB, "east")
	idA2, _ := spiffeid.Cluster(enrolltest.TrustDomainA, "west")
	notSpiffe, _ := url.Parse("https://acme.example/nave/cluster/east")
	caA := h.CA.Authority(enrolltest.MeshA)

	cases := []struct {
		name   string
		cert   func() *tls.Certificate
		code   codes.Code
		reason string
	}{
		{"no client certificate", func() *tls.Certificate { return nil }, codes.Unauthenticated, "no_certificate"},
		{"another CA's certificate for an enrolled cluster", func() *tls.Certificate {
			c := rogue.ClientCert(time.Hour, idA)
			return &c
		}, codes.Unauthenticated, "untrusted"},
		{"mesh A's CA certificate claiming mesh B's trust domain", func() *tls.Certificate {
			c := caA.ClientCert(time.Hour, idB)
			return &c
		}, codes.Unauthenticated, "untrusted"},
		{"two URI SANs", func() *tls.Certificate {
			c := caA.ClientCert(time.Hour, idA, idA2)
			return &c
		}, codes.Unauthenticated, "bad_identity"},
		{"no URI SAN", func() *tls.Certificate {
			c := caA.ClientCert(time.Hour)
			return &c
		}, codes.Unauthenticated, "bad_identity"},
		{"a URI SAN that is not a SPIFFE ID", func() *tls.Certificate {
			c := caA.ClientCert(time.Hour, notSpiffe)
			return &c
		}, codes.Unauthenticated, "bad_identity"},
		{"unknown trust domain", func() *tls.Certificate {
			id, _ := spiffeid.Cluster("gamma.example", "east")
			c := caA.ClientCert(time.Hour, id)
			return &c
		}, codes.Unauthenticated, "unknown_trust_domain"},
		{"mesh's CA, cluster never enrolled", func() *tls.Certificate {
			c := caA.ClientCert(time.Hour, idA2)
			return &c
		}, codes.PermissionDenied, "not_enrolled"},
		{"expired certificate", func() *tls.Certificate {
			c := caA.ClientCert(-time.Minute, idA)
			return &c
		}, codes.Unauthenticated, "untrusted"},
		{"server-only certificate", func() *tls.Certificate {
			key, _ := newCSR(t)
			leaf := caA.Issue(&x509.Certificate{URIs: []*url.URL{idA}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, key.Public())
			c := tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}
			return &c
		}, codes.Unauthenticated, "untrusted"},
	}
	recordsBefore, _ := h.Store.Clusters(t.Context())
	for _, c := range cases {
		cert := c.cert()
		before := h.Counter(t, "nave_hub_spoke_auth_refusals_total", c.reason)
		_, err := openPush(t, h, cert)
		if status.Code(err) != c.code {
			t.Errorf("%s: push stream %v, want %s", c.name, err, c.code)
		}
		if cert != nil {
			_, err = renewCall(t, h, *cert)
		} else {
			_, err = protocolv1.NewEnrollmentClient(h.Dial(t, nil)).Renew(context.Background(), &protocolv1.RenewRequest{})
		}
		if status.Code(err) != c.code {
			t.Errorf("%s: renew %v, want %s", c.name, err, c.code)
		}
		if got := h.Counter(t, "nave_hub_spoke_auth_refusals_total", c.reason); got != before+2 {
			t.Errorf("%s: auth refusals{reason=%s} went from %v to %v, want +2", c.name, c.reason, before, got)
		}
	}
	if st := h.Ingest.Status(); len(st) != 0 {
		t.Errorf("refused streams reached ingest: %+v", st)
	}
	if recordsAfter, _ := h.Store.Clusters(t.Context()); !reflect.DeepEqual(recordsBefore, recordsAfter) {
		t.Errorf("refused renewals changed the records:\n%+v\n-> %+v", recordsBefore, recordsAfter)
	}
	if got := h.Counter(t, "nave_hub_enroll_renewals_total", ""); got != 0 {
		t.Errorf("renewals counted: %v", got)
	}
	if n := strings.Count(h.Logs(), `"msg":"spoke authentication refused"`); n != 2*len(cases) {
		t.Errorf("%d audit lines for %d refusals", n, 2*len(cases))
	}
}

func TestMisbehavingCAIsCaught(t *testing.T) {
	h := enrolltest.StartHub(t, enrolltest.HubOptions{})
	other, _ := spiffeid.Cluster(enrolltest.TrustDomainA, "someone-else")
	h.CA.Tamper = func(c *x509.Certificate) { c.URIs = []*url.URL{other} }
	e := enrollCall(t, h, newToken(t, h, enrolltest.MeshA, "east"))
	wantStatus(t, "certificate for the wrong cluster", e.err, codes.Internal, "is used up: create a new one")
	if _, err := h.Store.Cluster(t.Context(), enrolltest.MeshA, "east"); err == nil {
		t.Error("a cluster whose certificate was withheld is recorded as enrolled")
	}
	if !strings.Contains(h.Logs(), "issued for acme.example/someone-else") {
		t.Error("the log does not say what was wrong with the certificate")
	}
}

func TestRestartedHubKnowsClustersRevocationsAndUsedTokens(t *testing.T) {
	ca := enrolltest.NewCA()
	ca.AddMesh(enrolltest.MeshA, enrolltest.TrustDomainA)
	dir := t.TempDir()
	before := enrolltest.StartHubWithCA(t, ca, enrolltest.HubOptions{Dir: dir})
	usedToken := newToken(t, before, enrolltest.MeshA, "east")
	e := enrollCall(t, before, usedToken)
	if e.err != nil {
		t.Fatal(e.err)
	}
	east := e.cert
	west := enrolled(t, before, enrolltest.MeshA, "west")
	if err := before.Store.Revoke(t.Context(), enrolltest.MeshA, "west"); err != nil {
		t.Fatal(err)
	}

	after := enrolltest.StartHubWithCA(t, ca, enrolltest.HubOptions{Dir: dir})
	if _, err := openPush(t, after, &east); err != nil {
		t.Errorf("enrolled cluster after a restart: %v", err)
	}
	if _, err := renewCall(t, after, east); err != nil {
		t.Errorf("renewal after a restart: %v", err)
	}
	_, err := openPush(t, after, &west)
	wantStatus(t, "revoked cluster after a restart", err, codes.PermissionDenied, "revoked")
	_, err = renewCall(t, after, west)
	wantStatus(t, "revoked cluster renewing after a restart", err, codes.PermissionDenied, "revoked")
	wantStatus(t, "used token after a restart", enrollCall(t, after, usedToken).err, codes.Unauthenticated, "already used")
}
