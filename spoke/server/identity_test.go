package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/navemesh/nave/internal/freeport"
	"github.com/navemesh/nave/internal/testlog"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/internal/x509test"
	"github.com/navemesh/nave/shared/settings"
	"github.com/navemesh/nave/spoke/enroll"
	"github.com/navemesh/nave/spoke/spokeconfig"
)

const waitFor = 10 * time.Second

const serviceEntry = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: svc, namespace: ns}
spec:
  hosts: [svc.example.com]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.1}]
`

// The spoke against a real hub (enrolling, pushing over mTLS, the hub's
// refusals) is tested with the nave-spoke binary in e2e
// (spoke_identity_test.go).

// spoke is one run of Serve, the binary's whole life, in the test.
type spoke struct {
	admin string
	logs  *syncBuffer
	done  chan error
	stop  context.CancelFunc
}

// startSpoke runs Serve with the configuration args (flags, as the binary
// gets them) on top of an fs:// source holding one ServiceEntry and a free
// admin port.
func startSpoke(t *testing.T, args ...string) *spoke {
	t.Helper()
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "se.yaml"), []byte(serviceEntry), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &spoke{admin: freeAddr(t), logs: &syncBuffer{}, done: make(chan error, 1)}
	// A state directory of the test's own: the default is relative to the
	// working directory, the package's source.
	args = append([]string{"--source=fs://" + src, "--admin.listen=" + s.admin, "--hub.state-dir=" + filepath.Join(t.TempDir(), "state"),
		"--hub.backoff-initial=50ms", "--hub.backoff-max=200ms"}, args...)
	var cfg spokeconfig.Config
	if err := settings.Load(spokeconfig.Program, &cfg, args, io.Discard); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.MultiWriter(s.logs, testWriter{t}), nil))
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	go func() { s.done <- Serve(ctx, cfg, log) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.done:
		case <-time.After(waitFor):
			t.Error("Serve did not return after its context ended")
		}
	})
	return s
}

// exit waits for Serve to return by itself.
func (s *spoke) exit(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.done:
		s.done <- err // for the cleanup
		return err
	case <-time.After(waitFor):
		t.Fatal("Serve did not return")
		return nil
	}
}

// shutdown ends Serve as SIGTERM does and returns its result.
func (s *spoke) shutdown(t *testing.T) error {
	t.Helper()
	s.stop()
	return s.exit(t)
}

// get fetches an admin path and returns its status and body; it waits
// for the admin server to listen (Serve runs in a goroutine).
func (s *spoke) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	var resp *http.Response
	testwait.For(t, waitFor, func() (err error) {
		resp, err = http.Get("http://" + s.admin + path)
		return err
	})
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

func (s *spoke) identity(t *testing.T) identityView {
	t.Helper()
	code, body := s.get(t, "/debug/identity")
	var v identityView
	if err := json.Unmarshal(body, &v); code != http.StatusOK || err != nil {
		t.Fatalf("/debug/identity: %d %s (%v)", code, body, err)
	}
	return v
}

// TestSpokeServesAdminWhileTheHubIsUnreachable: enrollment waits for the
// hub, retrying; meanwhile metrics and debug views are served and
// readiness says why the spoke is not ready; SIGTERM stops it cleanly.
// No hub is needed: nothing listens at its address, and the token is
// never sent.
func TestSpokeServesAdminWhileTheHubIsUnreachable(t *testing.T) {
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("nave-join.6f1c0e9a3b2d4c58.never-sent\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--mesh=acme", "--cluster=east", "--hub.address=" + freeAddr(t), // nothing listens there
		"--hub.server-name=hub.nave.test", "--hub.ca-hash=" + enroll.CAHash(x509test.NewAuthority("hub serving root").Cert),
		"--hub.state-dir=" + filepath.Join(t.TempDir(), "state"), "--hub.token-file=" + token}

	s := startSpoke(t, args...)
	testwait.For(t, waitFor, func() error {
		if !strings.Contains(s.logs.String(), "retrying enrollment") {
			return fmt.Errorf("no retry logged yet")
		}
		return nil
	})
	if code, _ := s.get(t, "/metrics"); code != http.StatusOK {
		t.Errorf("/metrics: %d", code)
	}
	if v := s.identity(t); v.Enrolled || !strings.Contains(v.LastError, "Unavailable") {
		t.Errorf("/debug/identity = %+v, want not enrolled, the hub unavailable", v)
	}
	if code, body := s.get(t, "/healthz/ready"); code != http.StatusServiceUnavailable || !bytes.Contains(body, []byte("not enrolled yet")) {
		t.Errorf("/healthz/ready: %d %s", code, body)
	}
	if err := s.shutdown(t); err != nil {
		t.Errorf("Serve stopped while enrolling: %v, want nil", err)
	}
}

func TestSpokeInPlaintextWarns(t *testing.T) {
	s := startSpoke(t, "--hub.plaintext", "--hub.address="+freeAddr(t))
	testwait.For(t, waitFor, func() error {
		if !strings.Contains(s.logs.String(), `msg="INSECURE: hub.plaintext is set`) {
			return fmt.Errorf("no INSECURE warning logged")
		}
		return nil
	})
	if code, body := s.get(t, "/debug/identity"); code != http.StatusOK || !bytes.Equal(bytes.Join(bytes.Fields(body), nil), []byte(`{"plaintext":true}`)) {
		t.Errorf("/debug/identity: %d %s", code, body)
	}
	testwait.For(t, waitFor, func() error {
		if code, body := s.get(t, "/healthz/ready"); code != http.StatusOK {
			return fmt.Errorf("ready: %d %s", code, body)
		}
		return nil
	})
}

// freeAddr is a loopback address nothing listens on (for now): below the
// ephemeral range, so no outgoing connection takes it meanwhile
// (internal/freeport).
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

type syncBuffer = testlog.Buffer

// testWriter logs through t.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
