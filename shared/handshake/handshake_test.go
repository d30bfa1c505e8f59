package handshake

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/credentials"

	"github.com/navemesh/nave/internal/testlog"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/internal/x509test"
	"github.com/navemesh/nave/shared/tlsconfig"
)

func newFailures(t *testing.T) (*Failures, *prometheus.Registry, *testlog.Buffer) {
	t.Helper()
	reg := prometheus.NewRegistry()
	logs := &testlog.Buffer{}
	return New(slog.New(slog.NewJSONHandler(logs, nil)), reg), reg, logs
}

// serverTLS is a server config with a throwaway certificate that requires
// a client certificate, as the spokes and relay listeners do.
func serverTLS(t *testing.T) *tls.Config {
	t.Helper()
	cert := x509test.NewAuthority("test").ServerCert("server")
	cfg := tlsconfig.Server(tlsconfig.Ours, tlsconfig.Static(cert))
	cfg.ClientAuth = tls.RequireAnyClientCert
	return cfg
}

// TestCredentialsCountAFailedHandshake: a gRPC listener's credentials count
// and log a client that closes mid-handshake, and one without a
// certificate.
func TestCredentialsCountAFailedHandshake(t *testing.T) {
	f, reg, logs := newFailures(t)
	creds := f.Credentials("replicas.relayListen", credentials.NewTLS(serverTLS(t)))
	if got := testutil.ToFloat64(f.counter.WithLabelValues("replicas.relayListen")); got != 0 {
		t.Fatalf("before any handshake: %v", got)
	}

	server, client := net.Pipe()
	client.Close()
	if _, _, err := creds.Clone().ServerHandshake(server); err == nil {
		t.Fatal("a handshake with a closed client succeeded")
	}

	// Over TCP, not a pipe: both ends write alerts at once.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		conn, err := net.Dial("tcp", lis.Addr().String())
		if err != nil {
			return
		}
		c := tls.Client(conn, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test's client checks nothing
		_ = c.Handshake()
		_, _ = c.Read(make([]byte, 1)) // the server's alert
		c.Close()
	}()
	server, err = lis.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	if _, _, err := creds.ServerHandshake(server); err == nil {
		t.Fatal("a handshake without a client certificate succeeded")
	}
	if got := testutil.ToFloat64(f.counter.WithLabelValues("replicas.relayListen")); got != 2 {
		t.Errorf("nave_tls_handshake_failures_total{listener=replicas.relayListen} = %v, want 2", got)
	}
	if n := strings.Count(logs.String(), `"msg":"tls handshake failed","listener":"replicas.relayListen"`); n != 2 {
		t.Errorf("%d structured lines, want 2:\n%s", n, logs.String())
	}
	if n, err := testutil.GatherAndCount(reg, "nave_tls_handshake_failures_total"); err != nil || n != 1 {
		t.Errorf("registered series: %d, %v", n, err)
	}
}

// TestErrorLogCountsHTTPHandshakes: an HTTP server's failed handshakes are
// counted and logged structured, rate-limited, with no unstructured line.
func TestErrorLogCountsHTTPHandshakes(t *testing.T) {
	f, _, logs := newFailures(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler(), ErrorLog: f.ErrorLog("admin.operatorListen")}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(tls.NewListener(lis, serverTLS(t))) }()
	t.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		<-done
	})

	const conns = 3 * logBurst
	for range conns {
		c, err := net.Dial("tcp", lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	testwait.Until(t, "every dropped connection counted", func() bool {
		return testutil.ToFloat64(f.counter.WithLabelValues("admin.operatorListen")) == conns
	})
	out := logs.String()
	if strings.Contains(out, "http: TLS handshake error") && !strings.Contains(out, `"msg":"tls handshake failed"`) {
		t.Errorf("unstructured lines:\n%s", out)
	}
	if n := strings.Count(out, `"msg":"tls handshake failed"`); n < 1 || n >= conns {
		t.Errorf("%d lines for %d failed handshakes, want at least one and fewer (rate-limited):\n%s", n, conns, out)
	}
	if !strings.Contains(out, `"listener":"admin.operatorListen","peer":"127.0.0.1:`) {
		t.Errorf("a line lacks the listener or the peer:\n%s", out)
	}
}

// TestErrorLogRoutesOtherLines: the HTTP server's other lines are logged
// structured, and count nothing.
func TestErrorLogRoutesOtherLines(t *testing.T) {
	f, reg, logs := newFailures(t)
	if err := f.ErrorLog("webhook.listen").Output(1, "http: superfluous response.WriteHeader call"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), `"msg":"http server error","listener":"webhook.listen","err":"http: superfluous response.WriteHeader call"`) {
		t.Errorf("logged:\n%s", logs.String())
	}
	if n, err := testutil.GatherAndCount(reg, "nave_tls_handshake_failures_total"); err != nil || n != 0 {
		t.Errorf("series after a line that is no handshake: %d, %v", n, err)
	}
}
