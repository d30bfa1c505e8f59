package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/navemesh/nave/hub/enroll/enrolltest"
	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/internal/testlog"
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

// spoke is one run of serve, the binary's whole life, in the test.
type spoke struct {
	admin string
	logs  *syncBuffer
	done  chan error
	stop  context.CancelFunc
}

// startSpoke runs serve with the configuration args (flags, as the binary
// gets them) on top of an fs:// source holding one ServiceEntry and a free
// admin port.
func startSpoke(t *testing.T, args ...string) *spoke {
	t.Helper()
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "se.yaml"), []byte(serviceEntry), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &spoke{admin: freeAddr(t), logs: &syncBuffer{}, done: make(chan error, 1)}
	args = append([]string{"--source=fs://" + src, "--admin.listen=" + s.admin,
		"--hub.backoff-initial=50ms", "--hub.backoff-max=200ms"}, args...)
	var cfg spokeconfig.Config
	if err := settings.Load(spokeconfig.Program, &cfg, args, io.Discard); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.MultiWriter(s.logs, testWriter{t}), nil))
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	go func() { s.done <- serve(ctx, cfg, log) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.done:
		case <-time.After(waitFor):
			t.Error("serve did not return after its context ended")
		}
	})
	return s
}

// exit waits for serve to return by itself.
func (s *spoke) exit(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.done:
		s.done <- err // for the cleanup
		return err
	case <-time.After(waitFor):
		t.Fatal("serve did not return")
		return nil
	}
}

// shutdown ends serve as SIGTERM does and returns its result.
func (s *spoke) shutdown(t *testing.T) error {
	t.Helper()
	s.stop()
	return s.exit(t)
}

// get fetches an admin path and returns its status and body; it waits
// for the admin server to listen (serve runs in a goroutine).
func (s *spoke) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	var resp *http.Response
	eventually(t, func() (err error) {
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

// tlsArgs are the flags of a spoke of acme/<cluster> that trusts h by the
// pin of its serving CA and keeps its credentials in stateDir.
func tlsArgs(h *enrolltest.Hub, cluster, stateDir string) []string {
	return []string{"--mesh=" + enrolltest.MeshA, "--cluster=" + cluster, "--hub.address=" + h.Addr,
		"--hub.server-name=" + enrolltest.ServerName, "--hub.ca-hash=" + enroll.CAHash(h.Serving.Cert),
		"--hub.state-dir=" + stateDir}
}

func tokenFile(t *testing.T, h *enrolltest.Hub, mesh, cluster string) (path, token string) {
	t.Helper()
	tok, _, err := h.Store.CreateToken(mesh, cluster, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil { // as a Secret may hold it
		t.Fatal(err)
	}
	return path, tok
}

// hubHolds waits until the hub's ingest has the one ServiceEntry under
// acme/cluster, and nothing under another cluster.
func hubHolds(t *testing.T, h *enrolltest.Hub, cluster string) {
	t.Helper()
	eventually(t, func() error {
		st := h.Ingest.Status()
		if len(st) != 1 || st[0].Identity != (ingest.Identity{Mesh: enrolltest.MeshA, Cluster: cluster}) {
			return fmt.Errorf("hub streams %+v, want acme/%s only", st, cluster)
		}
		n := 0
		for _, c := range h.Ingest.Clusters(enrolltest.MeshA) {
			if c.Name != cluster {
				return fmt.Errorf("hub holds cluster %s", c.Name)
			}
			n += len(c.Objects)
		}
		if n != 1 {
			return fmt.Errorf("hub holds %d objects of acme/%s, want 1", n, cluster)
		}
		return nil
	})
}

func TestSpokeEnrollsThenPushesOverMTLS(t *testing.T) {
	h := enrolltest.StartHub(t, enrolltest.HubOptions{})
	token, _ := tokenFile(t, h, enrolltest.MeshA, "east")
	stateDir := filepath.Join(t.TempDir(), "state")

	s := startSpoke(t, append(tlsArgs(h, "east", stateDir), "--hub.token-file="+token)...)
	// The hub has only the CertAuthenticator: what it files under
	// acme/east came over mTLS with the enrolled certificate.
	hubHolds(t, h, "east")
	eventually(t, func() error {
		if code, body := s.get(t, "/healthz/ready"); code != http.StatusOK {
			return fmt.Errorf("ready: %d %s", code, body)
		}
		return nil
	})
	v := s.identity(t)
	if !v.Enrolled || v.Plaintext || v.Mesh != enrolltest.MeshA || v.Cluster != "east" || v.TrustDomain != enrolltest.TrustDomainA ||
		v.Serial == "" || v.NotAfter.Before(time.Now()) || v.URI != "spiffe://acme.example/nave/cluster/east" {
		t.Errorf("/debug/identity = %+v", v)
	}
	if len(v.HubCAHashes) != 1 || v.HubCAHashes[0] != enroll.CAHash(h.Serving.Cert) {
		t.Errorf("hub CA pins %v, want the serving CA's %s", v.HubCAHashes, enroll.CAHash(h.Serving.Cert))
	}
	if _, body := s.get(t, "/debug/uplink"); !bytes.Contains(body, []byte(`"tls": true`)) {
		t.Errorf("/debug/uplink: %s", body)
	}
	if err := s.shutdown(t); err != nil {
		t.Fatalf("serve: %v", err)
	}
	first := h.Ingest.Status()[0].ConnectedAt

	// Restarted without the token (the Secret is gone): the stored
	// credentials are used, the token file is not read.
	s = startSpoke(t, append(tlsArgs(h, "east", stateDir), "--hub.token-file="+filepath.Join(t.TempDir(), "gone"))...)
	eventually(t, func() error {
		if st := h.Ingest.Status(); len(st) != 1 || !st[0].Connected || !st[0].ConnectedAt.After(first) {
			return fmt.Errorf("hub streams %+v, want a new stream", st)
		}
		return nil
	})
	hubHolds(t, h, "east")
	if strings.Contains(s.logs.String(), "enrolling") {
		t.Error("the restarted spoke enrolled again")
	}
}

func TestSpokeRefusesAReusedToken(t *testing.T) {
	h := enrolltest.StartHub(t, enrolltest.HubOptions{})
	token, tok := tokenFile(t, h, enrolltest.MeshA, "east")
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := enroll.Enroll(ctx, enroll.Options{Address: h.Addr, ServerName: enrolltest.ServerName,
		HubCA: h.Serving.PEM(), StateDir: t.TempDir()}, tok); err != nil {
		t.Fatal(err)
	}

	stateDir := filepath.Join(t.TempDir(), "state")
	s := startSpoke(t, append(tlsArgs(h, "east", stateDir), "--hub.token-file="+token)...)
	err := s.exit(t) // at once: a refusal is not retried
	if err == nil || !strings.Contains(err.Error(), "refused the join token") || !strings.Contains(err.Error(), "already used") ||
		!strings.Contains(err.Error(), token) {
		t.Fatalf("serve with a used token: %v, want the hub's refusal (already used) naming the token file", err)
	}
	t.Logf("refused: %v", err)
	if strings.Contains(err.Error(), tok[strings.LastIndex(tok, ".")+1:]) {
		t.Error("the error holds the token's secret")
	}
	if _, err := enroll.Load(stateDir); err == nil {
		t.Error("credentials saved after a refusal")
	}
}

func TestSpokeRefusesCredentialsOfAnotherCluster(t *testing.T) {
	h := enrolltest.StartHub(t, enrolltest.HubOptions{})
	_, tok := tokenFile(t, h, enrolltest.MeshA, "east")
	stateDir := filepath.Join(t.TempDir(), "state")
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := enroll.Enroll(ctx, enroll.Options{Address: h.Addr, ServerName: enrolltest.ServerName,
		HubCAHash: enroll.CAHash(h.Serving.Cert), StateDir: stateDir}, tok); err != nil {
		t.Fatal(err)
	}

	s := startSpoke(t, tlsArgs(h, "west", stateDir)...)
	err := s.exit(t)
	if err == nil || !strings.Contains(err.Error(), `mesh "acme" cluster "east"`) || !strings.Contains(err.Error(), `mesh "acme" cluster "west"`) {
		t.Fatalf("serve with the credentials of acme/east as acme/west: %v, want a refusal naming both", err)
	}
	t.Logf("refused: %v", err)
	if st := h.Ingest.Status(); len(st) != 0 {
		t.Errorf("the spoke connected: %+v", st)
	}

	// A token for another cluster than the spoke's: the token decides the
	// identity, so the spoke stops rather than push as another cluster.
	token, _ := tokenFile(t, h, enrolltest.MeshA, "east")
	s = startSpoke(t, append(tlsArgs(h, "west", filepath.Join(t.TempDir(), "state")), "--hub.token-file="+token)...)
	err = s.exit(t)
	if err == nil || !strings.Contains(err.Error(), "the join token in hub.tokenFile "+token) || !strings.Contains(err.Error(), `cluster "east"`) {
		t.Fatalf("serve with a token of acme/east as acme/west: %v, want a refusal naming both", err)
	}
	t.Logf("refused: %v", err)
	if st := h.Ingest.Status(); len(st) != 0 {
		t.Errorf("the spoke connected: %+v", st)
	}
}

// TestSpokeServesAdminWhileTheHubIsUnreachable: enrollment waits for the
// hub, retrying; meanwhile metrics and debug views are served and
// readiness says why the spoke is not ready; SIGTERM stops it cleanly.
func TestSpokeServesAdminWhileTheHubIsUnreachable(t *testing.T) {
	h := enrolltest.StartHub(t, enrolltest.HubOptions{})
	token, _ := tokenFile(t, h, enrolltest.MeshA, "east")
	args := tlsArgs(h, "east", filepath.Join(t.TempDir(), "state"))
	args = append(args, "--hub.token-file="+token, "--hub.address="+freeAddr(t)) // nothing listens there

	s := startSpoke(t, args...)
	eventually(t, func() error {
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
		t.Errorf("serve stopped while enrolling: %v, want nil", err)
	}
}

func TestSpokeInPlaintextWarns(t *testing.T) {
	s := startSpoke(t, "--hub.plaintext", "--hub.address="+freeAddr(t))
	eventually(t, func() error {
		if !strings.Contains(s.logs.String(), `msg="INSECURE: hub.plaintext is set`) {
			return fmt.Errorf("no INSECURE warning logged")
		}
		return nil
	})
	if code, body := s.get(t, "/debug/identity"); code != http.StatusOK || !bytes.Equal(bytes.Join(bytes.Fields(body), nil), []byte(`{"plaintext":true}`)) {
		t.Errorf("/debug/identity: %d %s", code, body)
	}
	eventually(t, func() error {
		if code, body := s.get(t, "/healthz/ready"); code != http.StatusOK {
			return fmt.Errorf("ready: %d %s", code, body)
		}
		return nil
	})
}

func TestSpokeNeedsATokenAndAWayToTrustTheHub(t *testing.T) {
	h := enrolltest.StartHub(t, enrolltest.HubOptions{})
	token, _ := tokenFile(t, h, enrolltest.MeshA, "east")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--hub.ca-hash="}, "neither hub.caHash nor hub.caFile is set"},
		{[]string{"--hub.token-file="}, "hub.tokenFile is not set"},
		{[]string{"--hub.token-file=" + filepath.Join(t.TempDir(), "missing")}, "hub.tokenFile: open"},
	} {
		args := append(tlsArgs(h, "east", filepath.Join(t.TempDir(), "state")), "--hub.token-file="+token)
		s := startSpoke(t, append(args, tc.args...)...)
		if err := s.exit(t); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	if n := len(h.Ingest.Status()); n != 0 {
		t.Errorf("%d spokes connected", n)
	}
}

func eventually(t *testing.T, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freeAddr is a loopback address nothing listens on (for now).
func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

type syncBuffer = testlog.Buffer

// testWriter logs through t.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestSpokeKeepsItsTokenFromAHubThatDoesNotMatchThePin: a failed handshake
// is retried like an unreachable hub (it says why), and the token is not
// spent.
func TestSpokeKeepsItsTokenFromAHubThatDoesNotMatchThePin(t *testing.T) {
	h := enrolltest.StartHub(t, enrolltest.HubOptions{})
	token, tok := tokenFile(t, h, enrolltest.MeshA, "east")
	args := append(tlsArgs(h, "east", filepath.Join(t.TempDir(), "state")), "--hub.token-file="+token,
		"--hub.ca-hash="+enroll.CAHash(x509test.NewAuthority("another").Cert))
	s := startSpoke(t, args...)
	eventually(t, func() error {
		if v := s.identity(t); !strings.Contains(v.LastError, "CA hash") {
			return fmt.Errorf("/debug/identity = %+v, want the pin mismatch", v)
		}
		return nil
	})
	if err := s.shutdown(t); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := enroll.Enroll(ctx, enroll.Options{Address: h.Addr, ServerName: enrolltest.ServerName,
		HubCA: h.Serving.PEM(), StateDir: t.TempDir()}, tok); err != nil {
		t.Errorf("the token after the spoke tried it at a hub it does not trust: %v", err)
	}
}
