package enroll_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/navemesh/nave/hub/enroll/enrolltest"
	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
)

// waitFor bounds every wait; a passing test never waits for it.
const waitFor = 10 * time.Second

// newCSR returns a fresh P-256 key and a PEM certificate request for it.
func newCSR(t testing.TB) (*ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "spoke"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// keyPair makes a tls.Certificate of a PEM chain and its key.
func keyPair(t testing.TB, chainPEM []byte, key *ecdsa.PrivateKey) tls.Certificate {
	t.Helper()
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.X509KeyPair(chainPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newToken creates a join token for (mesh, cluster), valid for an hour.
func newToken(t testing.TB, h *enrolltest.Hub, mesh, cluster string) string {
	t.Helper()
	tok, _, err := h.Store.CreateToken(t.Context(), mesh, cluster, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// enrollment is an Enroll call's result.
type enrollment struct {
	resp *protocolv1.EnrollResponse
	cert tls.Certificate
	err  error
}

// enrollCall calls Enroll over TLS without a client certificate.
func enrollCall(t testing.TB, h *enrolltest.Hub, token string) enrollment {
	t.Helper()
	return enrollOn(t, h.Dial(t, nil), token)
}

// enrollOn calls Enroll on conn (which presents no client certificate).
func enrollOn(t testing.TB, conn *grpc.ClientConn, token string) enrollment {
	t.Helper()
	key, csr := newCSR(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	resp, err := protocolv1.NewEnrollmentClient(conn).Enroll(ctx, &protocolv1.EnrollRequest{Token: token, CsrPem: csr})
	e := enrollment{resp: resp, err: err}
	if err == nil {
		e.cert = keyPair(t, resp.GetCertChainPem(), key)
	}
	return e
}

// enrolled enrolls (mesh, cluster) with a fresh token and returns its
// client certificate.
func enrolled(t testing.TB, h *enrolltest.Hub, mesh, cluster string) tls.Certificate {
	t.Helper()
	e := enrollCall(t, h, newToken(t, h, mesh, cluster))
	if e.err != nil {
		t.Fatalf("enroll %s/%s: %v", mesh, cluster, e.err)
	}
	return e.cert
}

// renewCall calls Renew presenting cert.
func renewCall(t testing.TB, h *enrolltest.Hub, cert tls.Certificate) (*protocolv1.RenewResponse, error) {
	t.Helper()
	_, csr := newCSR(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	return protocolv1.NewEnrollmentClient(h.Dial(t, &cert)).Renew(ctx, &protocolv1.RenewRequest{CsrPem: csr})
}

// wantStatus fails unless err has code and its message contains want.
func wantStatus(t testing.TB, what string, err error, code codes.Code, want string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), want) {
		t.Errorf("%s: got %v, want %s containing %q", what, err, code, want)
	}
}

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Now()} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// pushStream is an open Sync.Push stream; ended reports how it ended.
type pushStream struct {
	stream protocolv1.Sync_PushClient
	done   chan struct{}
	err    error
}

// ended waits for the stream to end and returns its error.
func (p *pushStream) ended(t testing.TB) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(waitFor):
		t.Fatal("stream did not end")
		return nil
	}
}

// openPush opens a Push stream presenting cert (nil: none) and sends the
// synced marker. It returns the stream once the hub ACKed it (so the hub
// holds it as the cluster's stream), or the error the hub refused it with.
func openPush(t testing.TB, h *enrolltest.Hub, cert *tls.Certificate) (*pushStream, error) {
	t.Helper()
	return openPushOn(t, h.Dial(t, cert))
}

func openPushOn(t testing.TB, conn *grpc.ClientConn) (*pushStream, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(),
		protocol.MetadataProtocol, protocol.Version))
	t.Cleanup(cancel)
	stream, err := protocolv1.NewSyncClient(conn).Push(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: protocol.SyncedTypeURL, Nonce: "1",
		SystemVersionInfo: protocol.Version}); err != nil {
		_, err = stream.Recv() // the hub's reason
		return nil, err
	}
	ack, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	if ack.GetErrorDetail() != nil {
		t.Fatalf("synced marker NACKed: %v", ack.GetErrorDetail())
	}
	p := &pushStream{stream: stream, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			if _, err := stream.Recv(); err != nil {
				p.err = err
				return
			}
		}
	}()
	return p, nil
}

// syncedMarker is a synced marker with nonce.
func syncedMarker(nonce string) *discoveryv3.DeltaDiscoveryResponse {
	return &discoveryv3.DeltaDiscoveryResponse{TypeUrl: protocol.SyncedTypeURL, Nonce: nonce, SystemVersionInfo: protocol.Version}
}
