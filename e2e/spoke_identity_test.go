package e2e

import (
	"bytes"
	"context"
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
	"github.com/navemesh/nave/internal/x509test"
	"github.com/navemesh/nave/spoke/enroll"
)

// The nave-spoke binary's identity against the hub's enrollment fixture in
// this process (hub/enroll/enrolltest: the Enrollment service, and ingest
// with only the CertAuthenticator), whose store and ingest the tests read:
// enrolling with a join token, pushing over mTLS, and the refusals that
// stop the spoke. The spoke's life without a hub (plaintext, a hub that
// cannot be reached) is tested in spoke/cmd/nave-spoke.

// identityWait bounds every wait for something that must happen.
const identityWait = 10 * time.Second

const identityServiceEntry = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: svc, namespace: ns}
spec:
  hosts: [svc.example.com]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.1}]
`

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

func TestSpokeEnrollsThenPushesOverMTLS(t *testing.T) {
	h := enrolltest.StartHub(t, enrolltest.HubOptions{})
	token, _ := tokenFile(t, h, enrolltest.MeshA, "east")
	stateDir := filepath.Join(t.TempDir(), "state")

	s := startIdentitySpoke(t, append(tlsArgs(h, "east", stateDir), "--hub.token-file="+token)...)
	// The hub has only the CertAuthenticator: what it files under
	// acme/east came over mTLS with the enrolled certificate.
	hubHolds(t, h, "east")
	testwait.For(t, identityWait, func() error {
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
	s = startIdentitySpoke(t, append(tlsArgs(h, "east", stateDir), "--hub.token-file="+filepath.Join(t.TempDir(), "gone"))...)
	testwait.For(t, identityWait, func() error {
		if st := h.Ingest.Status(); len(st) != 1 || !st[0].Connected || !st[0].ConnectedAt.After(first) {
			return fmt.Errorf("hub streams %+v, want a new stream", st)
		}
		return nil
	})
	hubHolds(t, h, "east")
	if strings.Contains(s.proc.Log(), "enrolling") {
		t.Error("the restarted spoke enrolled again")
	}
}

func TestSpokeRefusesAReusedToken(t *testing.T) {
	h := enrolltest.StartHub(t, enrolltest.HubOptions{})
	token, tok := tokenFile(t, h, enrolltest.MeshA, "east")
	ctx, cancel := context.WithTimeout(context.Background(), identityWait)
	defer cancel()
	if _, err := enroll.Enroll(ctx, enroll.Options{Address: h.Addr, ServerName: enrolltest.ServerName,
		HubCA: h.Serving.PEM(), StateDir: t.TempDir()}, tok); err != nil {
		t.Fatal(err)
	}

	stateDir := filepath.Join(t.TempDir(), "state")
	s := startIdentitySpoke(t, append(tlsArgs(h, "east", stateDir), "--hub.token-file="+token)...)
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
	ctx, cancel := context.WithTimeout(context.Background(), identityWait)
	defer cancel()
	if _, err := enroll.Enroll(ctx, enroll.Options{Address: h.Addr, ServerName: enrolltest.ServerName,
		HubCAHash: enroll.CAHash(h.Serving.Cert), StateDir: stateDir}, tok); err != nil {
		t.Fatal(err)
	}

	s := startIdentitySpoke(t, tlsArgs(h, "west", stateDir)...)
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
	s = startIdentitySpoke(t, append(tlsArgs(h, "west", filepath.Join(t.TempDir(), "state")), "--hub.token-file="+token)...)
	err = s.exit(t)
	if err == nil || !strings.Contains(err.Error(), "the join token in hub.tokenFile "+token) || !strings.Contains(err.Error(), `cluster "east"`) {
		t.Fatalf("serve with a token of acme/east as acme/west: %v, want a refusal naming both", err)
	}
	t.Logf("refused: %v", err)
	if st := h.Ingest.Status(); len(st) != 0 {
		t.Errorf("the spoke connected: %+v", st)
	}
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
		s := startIdentitySpoke(t, append(args, tc.args...)...)
		if err := s.exit(t); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	if n := len(h.Ingest.Status()); n != 0 {
		t.Errorf("%d spokes connected", n)
	}
}

// TestSpokeKeepsItsTokenFromAHubThatDoesNotMatchThePin: a failed handshake
// is retried like an unreachable hub (it says why), and the token is not
// spent.
func TestSpokeKeepsItsTokenFromAHubThatDoesNotMatchThePin(t *testing.T) {
	h := enrolltest.StartHub(t, enrolltest.HubOptions{})
	token, tok := tokenFile(t, h, enrolltest.MeshA, "east")
	args := append(tlsArgs(h, "east", filepath.Join(t.TempDir(), "state")), "--hub.token-file="+token,
		"--hub.ca-hash="+enroll.CAHash(x509test.NewAuthority("another").Cert))
	s := startIdentitySpoke(t, args...)
	testwait.For(t, identityWait, func() error {
		if v := s.identity(t); !strings.Contains(v.LastError, "CA hash") {
			return fmt.Errorf("/debug/identity = %+v, want the pin mismatch", v)
		}
		return nil
	})
	if err := s.shutdown(t); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), identityWait)
	defer cancel()
	if _, err := enroll.Enroll(ctx, enroll.Options{Address: h.Addr, ServerName: enrolltest.ServerName,
		HubCA: h.Serving.PEM(), StateDir: t.TempDir()}, tok); err != nil {
		t.Errorf("the token after the spoke tried it at a hub it does not trust: %v", err)
	}
}
