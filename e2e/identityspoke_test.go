package e2e

// Harness: a nave-spoke process that enrolls with an in-process hub
// (hub/enroll/enrolltest), and the join tokens and TLS flags it is given.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/hub/enroll/enrolltest"
	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/spoke/enroll"
)

// identityWait bounds every wait for something that must happen.
const identityWait = 10 * time.Second

// identitySpoke is one run of the nave-spoke binary.
type identitySpoke struct {
	admin string
	proc  *harness.Proc
}

// startIdentitySpoke runs nave-spoke with the flags args on top of an
// fs:// source holding one ServiceEntry and a free admin port, logging
// JSON. When the test ends, the spoke must exit within identityWait of
// SIGTERM.
func startIdentitySpoke(t *testing.T, args ...string) *identitySpoke {
	t.Helper()
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "se.yaml"), []byte(identityServiceEntry), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &identitySpoke{admin: addr(harness.FreePort(t))}
	args = append([]string{"--source=fs://" + src, "--admin.listen=" + s.admin,
		"--hub.backoff-initial=50ms", "--hub.backoff-max=200ms", "--log.format=json"}, args...)
	s.proc = harness.Start(t, "nave-spoke", binary("nave-spoke"), args...)
	t.Cleanup(func() { // before harness's, which kills after a grace
		_ = s.proc.Cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.proc.Done():
		case <-time.After(identityWait):
			t.Error("nave-spoke did not exit after SIGTERM")
		}
	})
	return s
}

// exit waits for the spoke to exit by itself and returns what serve
// returned: nil for exit code 0, else the error it logged when it stopped.
func (s *identitySpoke) exit(t *testing.T) error {
	t.Helper()
	select {
	case <-s.proc.Done():
	case <-time.After(identityWait):
		t.Fatal("nave-spoke did not exit")
	}
	if s.proc.ExitCode() == 0 {
		return nil
	}
	lines := strings.Split(strings.TrimSpace(s.proc.Log()), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		var rec struct {
			Msg string `json:"msg"`
			Err string `json:"err"`
		}
		if json.Unmarshal([]byte(lines[i]), &rec) == nil && rec.Msg == "stopped" && rec.Err != "" {
			return errors.New(rec.Err)
		}
	}
	return fmt.Errorf("nave-spoke exited %d without logging why:\n%s", s.proc.ExitCode(), s.proc.Log())
}

// shutdown ends the spoke with SIGTERM and returns what serve returned.
func (s *identitySpoke) shutdown(t *testing.T) error {
	t.Helper()
	if err := s.proc.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	return s.exit(t)
}

// get fetches an admin path and returns its status and body; it waits
// for the admin server to listen.
func (s *identitySpoke) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	var resp *http.Response
	testwait.For(t, identityWait, func() (err error) {
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

// spokeIdentityView is the body of the spoke's /debug/identity.
type spokeIdentityView struct {
	Plaintext   bool      `json:"plaintext"`
	Enrolled    bool      `json:"enrolled"`
	StateDir    string    `json:"stateDir"`
	LastError   string    `json:"lastError"`
	Mesh        string    `json:"mesh"`
	Cluster     string    `json:"cluster"`
	TrustDomain string    `json:"trustDomain"`
	URI         string    `json:"uri"`
	Serial      string    `json:"serial"`
	NotBefore   time.Time `json:"notBefore"`
	NotAfter    time.Time `json:"notAfter"`
	HubCAHashes []string  `json:"hubCAHashes"`
}

func (s *identitySpoke) identity(t *testing.T) spokeIdentityView {
	t.Helper()
	code, body := s.get(t, "/debug/identity")
	var v spokeIdentityView
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
	tok, _, err := h.Store.CreateToken(t.Context(), mesh, cluster, time.Hour)
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
	testwait.For(t, identityWait, func() error {
		st := h.Ingest.Status()
		if len(st) != 1 || st[0].ClusterIdentity != (ingest.ClusterIdentity{Mesh: enrolltest.MeshA, Cluster: cluster}) {
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

const identityServiceEntry = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: svc, namespace: ns}
spec:
  hosts: [svc.example.com]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.1}]
`
