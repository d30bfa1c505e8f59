package enrolltest

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/navemesh/nave/hub/enroll"
	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/internal/metrictest"
	"github.com/navemesh/nave/internal/testlog"
	"github.com/navemesh/nave/internal/x509test"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/tlsconfig"
)

// ServerName is the name the hub fixture's serving certificate is for.
const ServerName = "hub.nave.test"

// Meshes the hub fixture's CA knows from the start.
const (
	MeshA        = "acme"
	TrustDomainA = "acme.example"
	MeshB        = "beta"
	TrustDomainB = "beta.example"
)

// HubOptions configure StartHub.
type HubOptions struct {
	// Dir is the enrollment state dir; "" is a fresh temporary one.
	Dir string
	// Store, if set, is the enrollment store instead of a DirStore at Dir
	// (a SecretStore of Kube.HubStore, say).
	Store enroll.Store
	// Now is the DirStore's and the Enrollment service's clock; nil is
	// time.Now.
	Now func() time.Time
	// CertTTL of issued certificates; 0 is the default.
	CertTTL time.Duration
	// Signer, if set, issues and verifies cluster certificates instead of
	// the fixture's CA (for example the hub's real hub/ca Authority).
	Signer enroll.Signer
	// Register, if set, adds services to the fixture's gRPC server.
	Register func(*grpc.Server, *Hub)
	// Hosted, if set, is the meshes the hub serves (AuthOptions.Hosted,
	// ServerOptions.Hosted); nil serves both.
	Hosted func(mesh string) bool
}

// Hub is one hub replica's enrollment side behind a real gRPC server on
// 127.0.0.1 with TLS: the Enrollment service, ingest's Sync service with
// the CertAuthenticator, and the revocation Enforcer (100 ms interval).
// Its fields are set once by StartHub; what they point to is safe for
// concurrent use.
type Hub struct {
	Addr    string
	Serving *x509test.Authority // root of the hub's serving certificate
	CA      *CA                 // meshes MeshA and MeshB
	Store   enroll.Store
	Dir     string // the DirStore's directory; "" with HubOptions.Store
	Ingest  *ingest.Store
	Auth    *enroll.CertAuthenticator
	Metrics *prometheus.Registry

	logs *lockedBuffer
}

// StartHub starts a hub; it stops when the test ends.
func StartHub(t testing.TB, opts HubOptions) *Hub {
	t.Helper()
	ca := NewCA()
	ca.AddMesh(MeshA, TrustDomainA)
	ca.AddMesh(MeshB, TrustDomainB)
	return StartHubWithCA(t, ca, opts)
}

// StartHubWithCA starts a hub whose Signer is ca (replicas share one).
func StartHubWithCA(t testing.TB, ca *CA, opts HubOptions) *Hub {
	t.Helper()
	store := opts.Store
	if store == nil {
		if opts.Dir == "" {
			opts.Dir = t.TempDir()
		}
		var storeOpts []enroll.Option
		if opts.Now != nil {
			storeOpts = append(storeOpts, enroll.WithClock(opts.Now))
		}
		ds, err := enroll.OpenDir(opts.Dir, storeOpts...)
		if err != nil {
			t.Fatal(err)
		}
		store = ds
	}
	h := &Hub{Serving: x509test.NewAuthority("nave hub serving root"), CA: ca, Store: store, Dir: opts.Dir,
		Metrics: prometheus.NewRegistry(), logs: &lockedBuffer{}}
	log := slog.New(slog.NewJSONHandler(h.logs, nil))
	var signer enroll.Signer = ca
	if opts.Signer != nil {
		signer = opts.Signer
	}
	h.Auth = enroll.NewCertAuthenticator(signer, store, enroll.AuthOptions{Logger: log, Registerer: h.Metrics, Hosted: opts.Hosted})
	h.Ingest = ingest.NewStore(ingest.StoreOptions{StaleGracePeriod: time.Hour, Logger: log, Registerer: h.Metrics})
	in := ingest.NewServer(h.Ingest, h.Auth, ingest.ServerOptions{Logger: log, Registerer: h.Metrics})
	srv := enroll.NewServer(store, signer, h.Auth, enroll.ServerOptions{CertTTL: opts.CertTTL, Logger: log,
		Registerer: h.Metrics, Now: opts.Now, Hosted: opts.Hosted})
	enf := enroll.NewEnforcer(store, h.Ingest.Withdraw, enroll.EnforcerOptions{Interval: 100 * time.Millisecond,
		Logger: log, Registerer: h.Metrics})

	serving := h.Serving.ServerCert(ServerName)
	// The CertAuthenticator verifies the client certificate, per mesh.
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(
		tlsconfig.MutualServer(tlsconfig.Ours, tlsconfig.Static(serving), tls.RequestClientCert, nil))))
	protocolv1.RegisterEnrollmentServer(gs, srv)
	protocolv1.RegisterSyncServer(gs, in)
	if opts.Register != nil {
		opts.Register(gs, h)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.Addr = lis.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := gs.Serve(lis); err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	go func() {
		defer wg.Done()
		if err := enf.Run(ctx); err != nil {
			t.Errorf("enforcer: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		gs.Stop()
		wg.Wait()
	})
	return h
}

// TLS is a client configuration that verifies the hub and presents cert,
// if not nil.
func (h *Hub) TLS(cert *tls.Certificate) *tls.Config {
	if cert == nil {
		return tlsconfig.Client(h.Serving.Pool(), ServerName)
	}
	return tlsconfig.MutualClient(h.Serving.Pool(), ServerName, tlsconfig.Static(*cert))
}

// Dial connects to the hub over TLS, presenting cert if not nil.
func (h *Hub) Dial(t testing.TB, cert *tls.Certificate) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(h.Addr, grpc.WithTransportCredentials(credentials.NewTLS(h.TLS(cert))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Logs is everything the hub logged so far (JSON lines).
func (h *Hub) Logs() string { return h.logs.String() }

// Counter is the value of counter name with label reason ("" for a
// counter without labels); 0 if it has not been counted.
func (h *Hub) Counter(t testing.TB, name, reason string) float64 {
	t.Helper()
	if reason == "" {
		return metrictest.Value(t, h.Metrics, name)
	}
	return metrictest.Value(t, h.Metrics, name, "reason", reason)
}

type lockedBuffer = testlog.Buffer
