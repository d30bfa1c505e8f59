package integration

import (
	"context"
	"errors"
	"log/slog"
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

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/hub/enroll/enrolltest"
	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/spoke/enroll"
)

// enrollOptions are a spoke's enrollment options for hub h, trusting it by
// the pin of its serving CA.
func enrollOptions(t *testing.T, h *enrolltest.Hub) enroll.Options {
	return enroll.Options{Address: h.Addr, ServerName: enrolltest.ServerName,
		HubCAHash: enroll.CAHash(h.Serving.Cert), StateDir: filepath.Join(t.TempDir(), "spoke")}
}

// pushSynced opens a Push stream over conn and sends the synced marker; it
// returns nil once the hub ACKed it, or the hub's refusal.
func pushSynced(t *testing.T, conn *grpc.ClientConn) error {
	t.Helper()
	c, cancel := context.WithCancel(metadata.AppendToOutgoingContext(testCtx(t), protocol.MetadataProtocol, protocol.Version))
	t.Cleanup(cancel)
	stream, err := protocolv1.NewSyncClient(conn).Push(c)
	if err != nil {
		return err
	}
	if err := stream.Send(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: protocol.SyncedTypeURL, Nonce: "1"}); err != nil {
		_, err = stream.Recv()
		return err
	}
	_, err = stream.Recv()
	return err
}

// dialRenewer connects to hub h with the TLS of the spoke's Renewer r.
func dialRenewer(t *testing.T, h *enrolltest.Hub, r *enroll.Renewer) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(h.Addr, grpc.WithTransportCredentials(credentials.NewTLS(r.ClientTLS())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestEnrollByPinThenConnectWithTheCertificate(t *testing.T) {
	h := enrolltest.StartHub(t, enrolltest.HubOptions{})
	tok, _, err := h.Store.CreateToken(t.Context(), enrolltest.MeshA, "east", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	opts := enrollOptions(t, h)
	creds, err := enroll.Enroll(testCtx(t), opts, tok)
	if err != nil {
		t.Fatal(err)
	}
	if creds.Mesh != enrolltest.MeshA || creds.Cluster != "east" || creds.TrustDomain != enrolltest.TrustDomainA {
		t.Errorf("credentials for %s/%s in %s", creds.Mesh, creds.Cluster, creds.TrustDomain)
	}
	// The state dir is private and holds no token.
	for name, mode := range map[string]os.FileMode{"": 0o700, "credentials.pem": 0o600} {
		st, err := os.Stat(filepath.Join(opts.StateDir, name))
		if err != nil || st.Mode().Perm() != mode {
			t.Errorf("%s/%s: %v, %v; want mode %v", opts.StateDir, name, st.Mode().Perm(), err, mode)
		}
	}
	entries, _ := os.ReadDir(opts.StateDir)
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(opts.StateDir, e.Name()))
		if strings.Contains(string(b), tok[strings.LastIndex(tok, ".")+1:]) {
			t.Errorf("%s holds the join token", e.Name())
		}
	}

	r, err := enroll.NewRenewer(enroll.RenewerOptions{Address: h.Addr, ServerName: enrolltest.ServerName, StateDir: opts.StateDir})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Credentials().Certificate.Leaf.Equal(creds.Certificate.Leaf) {
		t.Error("the renewer loaded another certificate than enrollment saved")
	}
	// The pinned CA was kept: the spoke now trusts the hub by it.
	if err := pushSynced(t, dialRenewer(t, h, r)); err != nil {
		t.Fatalf("push stream with the enrolled certificate: %v", err)
	}
	st := h.Ingest.Status()
	if len(st) != 1 || st[0].ClusterIdentity != (ingest.ClusterIdentity{Mesh: enrolltest.MeshA, Cluster: "east"}) {
		t.Errorf("hub sees %+v, want acme/east", st)
	}
}

func TestEnrollWithTheHubCA(t *testing.T) {
	h := enrolltest.StartHub(t, enrolltest.HubOptions{})
	tok, _, _ := h.Store.CreateToken(t.Context(), enrolltest.MeshB, "west", time.Hour)
	opts := enrollOptions(t, h)
	opts.HubCAHash, opts.HubCA = "", h.Serving.PEM()
	creds, err := enroll.Enroll(testCtx(t), opts, tok)
	if err != nil {
		t.Fatal(err)
	}
	if creds.Mesh != enrolltest.MeshB || creds.Cluster != "west" {
		t.Errorf("credentials for %s/%s", creds.Mesh, creds.Cluster)
	}
}

// TestTokenIsNeverSentToAnImpostor points a spoke, pinned to the real
// hub's CA, at another server with a valid-looking certificate for the
// same name: the handshake fails before the token is sent.
func TestTokenIsNeverSentToAnImpostor(t *testing.T) {
	real := enrolltest.StartHub(t, enrolltest.HubOptions{})
	impostor := enrolltest.StartHub(t, enrolltest.HubOptions{Dir: real.Dir}) // even with the real state
	tok, _, _ := real.Store.CreateToken(t.Context(), enrolltest.MeshA, "east", time.Hour)

	opts := enrollOptions(t, real)
	opts.Address = impostor.Addr
	_, err := enroll.Enroll(testCtx(t), opts, tok)
	if err == nil || !strings.Contains(err.Error(), "CA hash") {
		t.Fatalf("enroll at an impostor: %v, want a refusal naming the CA hash", err)
	}
	opts.HubCAHash, opts.HubCA = "", real.Serving.PEM()
	if _, err := enroll.Enroll(testCtx(t), opts, tok); err == nil {
		t.Fatal("enroll at an impostor trusting the real hub's CA succeeded")
	}
	if strings.Contains(impostor.Logs(), "enrollment refused") || strings.Contains(impostor.Logs(), "spoke enrolled") {
		t.Errorf("the impostor saw an enrollment: %s", impostor.Logs())
	}
	if _, err := os.Stat(filepath.Join(opts.StateDir, "credentials.pem")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("credentials saved after a failed enrollment: %v", err)
	}
	// The token is unused: the real hub takes it.
	opts.Address = real.Addr
	if _, err := enroll.Enroll(testCtx(t), opts, tok); err != nil {
		t.Fatalf("the token at the real hub afterwards: %v", err)
	}
}

func TestEnrollReportsTheHubsRefusal(t *testing.T) {
	h := enrolltest.StartHub(t, enrolltest.HubOptions{})
	tok, _, _ := h.Store.CreateToken(t.Context(), enrolltest.MeshA, "east", time.Hour)
	opts := enrollOptions(t, h)
	if _, err := enroll.Enroll(testCtx(t), opts, tok); err != nil {
		t.Fatal(err)
	}
	again := enrollOptions(t, h)
	_, err := enroll.Enroll(testCtx(t), again, tok)
	if status.Code(errors.Unwrap(err)) != codes.Unauthenticated || !strings.Contains(err.Error(), "already used") {
		t.Errorf("enroll with a used token: %v, want Unauthenticated: already used", err)
	}
	if _, err := os.Stat(filepath.Join(again.StateDir, "credentials.pem")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("credentials saved after a refusal: %v", err)
	}
	for _, bad := range []enroll.Options{
		{Address: h.Addr, StateDir: again.StateDir},                                    // no way to trust the hub
		{Address: h.Addr, StateDir: again.StateDir, HubCAHash: "sha256:abc"},           // bad pin
		{Address: h.Addr, StateDir: again.StateDir, HubCA: []byte("not a PEM bundle")}, // bad CA
		{StateDir: again.StateDir, HubCAHash: opts.HubCAHash},                          // no address
	} {
		if _, err := enroll.Enroll(testCtx(t), bad, tok); err == nil {
			t.Errorf("Enroll(%+v) succeeded", bad)
		}
	}
}

func TestRenewUsesTheNewCertificateForNewConnections(t *testing.T) {
	h := enrolltest.StartHub(t, enrolltest.HubOptions{CertTTL: 3 * time.Second})
	tok, _, _ := h.Store.CreateToken(t.Context(), enrolltest.MeshA, "east", time.Hour)
	opts := enrollOptions(t, h)
	first, err := enroll.Enroll(testCtx(t), opts, tok)
	if err != nil {
		t.Fatal(err)
	}
	r, err := enroll.NewRenewer(enroll.RenewerOptions{Address: h.Addr, ServerName: enrolltest.ServerName,
		StateDir: opts.StateDir, RetryInitial: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	// Run renews at 70-80 % of the 3 s lifetime.
	oldLeaf := first.Certificate.Leaf
	testwait.Until(t, "the certificate renewed", func() bool { return !r.Credentials().Certificate.Leaf.Equal(oldLeaf) })
	// (When within the lifetime is TestRenewAt's matter: a loaded machine
	// may run this late.)
	t.Logf("renewed %v before the old certificate expired", time.Until(oldLeaf.NotAfter))
	renewed := r.Credentials()
	if renewed.Certificate.PrivateKey == first.Certificate.PrivateKey {
		t.Error("renewal kept the key")
	}
	// Saved, so a restarted spoke starts from it.
	loaded, err := enroll.Load(opts.StateDir)
	if err != nil || !loaded.Certificate.Leaf.Equal(renewed.Certificate.Leaf) {
		t.Errorf("state dir after renewal holds %v (%v), want the renewed certificate", loaded, err)
	}
	got, _ := r.GetClientCertificate(nil)
	if !got.Leaf.Equal(renewed.Certificate.Leaf) {
		t.Error("GetClientCertificate does not return the renewed certificate")
	}
	// Once the old certificate has expired, a new connection still
	// authenticates: it presents the renewed one.
	testwait.Until(t, "the old certificate expired", func() bool { return time.Now().After(oldLeaf.NotAfter.Add(100 * time.Millisecond)) })
	if err := pushSynced(t, dialRenewer(t, h, r)); err != nil {
		t.Fatalf("new connection after the old certificate expired: %v", err)
	}
}

func TestRevokedSpokeKeepsItsCredentialsWhenRenewalIsRefused(t *testing.T) {
	h := enrolltest.StartHub(t, enrolltest.HubOptions{})
	tok, _, _ := h.Store.CreateToken(t.Context(), enrolltest.MeshA, "east", time.Hour)
	opts := enrollOptions(t, h)
	if _, err := enroll.Enroll(testCtx(t), opts, tok); err != nil {
		t.Fatal(err)
	}
	r, err := enroll.NewRenewer(enroll.RenewerOptions{Address: h.Addr, ServerName: enrolltest.ServerName, StateDir: opts.StateDir})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Renew(testCtx(t)); err != nil {
		t.Fatalf("renew before the revocation: %v", err)
	}
	before := r.Credentials()
	if err := h.Store.Revoke(t.Context(), enrolltest.MeshA, "east"); err != nil {
		t.Fatal(err)
	}
	err = r.Renew(testCtx(t))
	if status.Code(errors.Unwrap(err)) != codes.PermissionDenied || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("renew after the revocation: %v, want PermissionDenied: revoked", err)
	}
	if r.Credentials() != before {
		t.Error("a refused renewal replaced the credentials")
	}
}

// A spoke asks for its fallback server's names: enrolment gets a cluster
// certificate valid for them; a spoke whose saved certificate lacks them
// (fallback.serverNames set after it enrolled) renews at once.
func TestClusterCertificateNamesTheFallbackServer(t *testing.T) {
	h := enrolltest.StartHub(t, enrolltest.HubOptions{})
	tok, _, _ := h.Store.CreateToken(t.Context(), enrolltest.MeshA, "east", time.Hour)
	opts := enrollOptions(t, h)
	opts.ServerNames = []string{"fallback.east.example", "127.0.0.1"}
	creds, err := enroll.Enroll(testCtx(t), opts, tok)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range opts.ServerNames {
		if err := creds.Certificate.Leaf.VerifyHostname(n); err != nil {
			t.Errorf("enrolled certificate: %v", err)
		}
	}

	names := []string{"fallback.east.example", "spoke.east.example"}
	r, err := enroll.NewRenewer(enroll.RenewerOptions{Address: h.Addr, ServerName: enrolltest.ServerName, ServerNames: names,
		StateDir: opts.StateDir, Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	testwait.Until(t, "the certificate without spoke.east.example renewed at once (it is far from due)", func() bool {
		return r.Credentials().Certificate.Leaf.VerifyHostname("spoke.east.example") == nil
	})
	leaf := r.Credentials().Certificate.Leaf
	if len(leaf.DNSNames) != 2 || len(leaf.IPAddresses) != 0 {
		t.Errorf("renewed certificate names %v %v, want %v", leaf.DNSNames, leaf.IPAddresses, names)
	}
}

// A fallback server name the hub may not give (one of its own names) is
// refused before the join token is spent: the same token then enrolls the
// spoke configured with a name of its own.
func TestRefusedServerNameKeepsTheToken(t *testing.T) {
	store, err := ca.NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	auth, err := ca.New(store, ca.Options{HubNames: []string{"hub.example"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := auth.Load(t.Context(), ca.Mesh{Name: enrolltest.MeshA, TrustDomain: enrolltest.TrustDomainA}); err != nil {
		t.Fatal(err)
	}
	h := enrolltest.StartHub(t, enrolltest.HubOptions{Signer: auth})
	tok, _, _ := h.Store.CreateToken(t.Context(), enrolltest.MeshA, "east", time.Hour)
	opts := enrollOptions(t, h)
	opts.ServerNames = []string{"hub.example"}
	_, err = enroll.Enroll(testCtx(t), opts, tok)
	if status.Code(errors.Unwrap(err)) != codes.InvalidArgument || !strings.Contains(err.Error(), `"hub.example"`) ||
		!strings.Contains(err.Error(), "the join token is not used") {
		t.Fatalf("enrolling with the hub's name: %v, want InvalidArgument naming it, the token kept", err)
	}
	opts.ServerNames = []string{"fallback.east.example"}
	creds, err := enroll.Enroll(testCtx(t), opts, tok)
	if err != nil {
		t.Fatalf("the same token with a name of the spoke's own: %v", err)
	}
	if err := creds.Certificate.Leaf.VerifyHostname("fallback.east.example"); err != nil {
		t.Error(err)
	}
}
