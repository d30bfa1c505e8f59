package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/navemesh/nave/hub/enroll/enrolltest"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/internal/x509test"
	"github.com/navemesh/nave/spoke/enroll"
)

// The nave-spoke binary's identity against the hub's enrollment fixture in
// this process (hub/enroll/enrolltest: the Enrollment service, and ingest
// with only the CertAuthenticator), whose store and ingest the tests read:
// enrolling with a join token, pushing over mTLS, and the refusals that
// stop the spoke. The spoke's life without a hub (plaintext, a hub that
// cannot be reached) is tested in spoke/server.

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
