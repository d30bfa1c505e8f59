package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/internal/kubetest"
)

// hubIdentity is the service account deploy/hub/rbac.yaml grants.
const hubIdentity = "system:serviceaccount:nave-system:nave-hub"

// TestHubCAInKubernetesSecret: the real hub with ca.store=kubernetes, as its
// service account, creates mesh default's root in Secret nave-ca-default,
// loads the same root after a restart, and writes nothing under
// state.dir/ca.
func TestHubCAInKubernetesSecret(t *testing.T) {
	c := kubetest.Start(t, kubetest.Options{})
	root := harness.ModuleRoot()
	for _, f := range []string{"namespace.yaml", "rbac.yaml"} {
		b, err := os.ReadFile(filepath.Join(root, "deploy", "hub", f))
		if err != nil {
			t.Fatal(err)
		}
		c.Apply(t, b)
	}
	h := &hub{t: t, admin: harness.FreePort(t), spokes: harness.FreePort(t), xds: harness.FreePort(t), state: t.TempDir(),
		extraArgs: []string{"--ca.store", "kubernetes", "--ca.kubeconfig", c.Kubeconfig(t, hubIdentity, "system:serviceaccounts", "system:serviceaccounts:nave-system")}}
	h.start()

	admin, err := ca.NewSecretClient(c.Admin)
	if err != nil {
		t.Fatal(err)
	}
	sec, err := admin.Get(t.Context(), "nave-system", "nave-ca-default")
	if err != nil {
		t.Fatalf("the hub did not create its mesh's Secret: %v", err)
	}
	want := pemFingerprint(t, sec.Data[ca.FileRootCert])
	if got := loadedRoot(t, h.proc.Log()); got != want {
		t.Fatalf("the hub loaded root %s, the Secret holds %s", got, want)
	}

	h.proc.Stop(10 * time.Second)
	h.start()
	if got := loadedRoot(t, h.proc.Log()); got != want {
		t.Fatalf("after a restart the hub loaded root %s, want %s (the Secret's)", got, want)
	}
	again, err := admin.Get(t.Context(), "nave-system", "nave-ca-default")
	if err != nil {
		t.Fatal(err)
	}
	if pemFingerprint(t, again.Data[ca.FileRootCert]) != want {
		t.Error("the Secret's root changed across the restart")
	}
	if _, err := os.Stat(filepath.Join(h.state, "ca")); !os.IsNotExist(err) {
		t.Errorf("state.dir/ca exists (%v): the mesh CA was written to disk", err)
	}
}

var caLoadedRE = regexp.MustCompile(`msg="ca loaded" component=ca mesh=default .*root_sha256=([0-9a-f]{64})`)

// loadedRoot returns the fingerprint of the root the hub logged loading
// for mesh default last.
func loadedRoot(t *testing.T, log string) string {
	t.Helper()
	m := caLoadedRE.FindAllStringSubmatch(log, -1)
	if len(m) == 0 {
		t.Fatalf("the hub logged no \"ca loaded\" for mesh default:\n%s", log)
	}
	return m[len(m)-1][1]
}

func pemFingerprint(t *testing.T, b []byte) string {
	t.Helper()
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatal("root-cert.pem holds no PEM block")
	}
	sum := sha256.Sum256(blk.Bytes)
	return hex.EncodeToString(sum[:])
}
