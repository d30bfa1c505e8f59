package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/hub/enroll"
	"github.com/navemesh/nave/hub/enroll/enrolltest"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/shared/tlspin"
	spokeenroll "github.com/navemesh/nave/spoke/enroll"
)

// TestHubStateInKubernetesSecrets: two real hubs with ca.store=kubernetes
// and state.store=kubernetes, each with a state dir of its own, share
// nothing but the API server (as the hub's service account of
// deploy/hub). Started together, they serve one serving CA, the pin
// navectl reads from the Secrets. A spoke enrolls through hub A with a
// token navectl made; hub B, restarted, serves the same CA, lists the
// cluster and accepts its certificate; a revocation by navectl cuts it off
// at both. Neither hub writes its state dir.
func TestHubStateInKubernetesSecrets(t *testing.T) {
	k := enrolltest.StartKube(t)
	kubeconfig := k.HubKubeconfig(t)
	newHub := func() *hub {
		return &hub{t: t, admin: harness.FreePort(t), spokes: harness.FreePort(t), xds: harness.FreePort(t), state: t.TempDir(),
			navectlState: []string{"--state-store", "kubernetes", "--kubeconfig", kubeconfig},
			extraArgs: []string{"--ca.store", "kubernetes", "--ca.kubeconfig", kubeconfig,
				"--state.store", "kubernetes", "--state.kubeconfig", kubeconfig}}
	}
	a, b := newHub(), newHub()
	a.launch()
	b.launch()
	a.waitReady()
	b.waitReady()

	pin := a.pin(t)
	sec, err := k.AdminSecrets.Get(t.Context(), enrolltest.HubNamespace, "nave-serving-ca-hub")
	if err != nil {
		t.Fatalf("the hubs did not create the serving CA's Secret: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(sec.Data[ca.FileRootCert]) {
		t.Fatal("Secret nave-serving-ca-hub holds no root-cert.pem")
	}
	for name, h := range map[string]*hub{"A": a, "B": b} {
		if got := servedCAPin(t, h); got != pin {
			t.Fatalf("hub %s serves a chain up to %s; navectl ca-hash says %s", name, got, pin)
		}
	}

	tok := a.token(t, "default", "east", "10m")
	s := startSecureSpoke(t, a, "spoke-east", "", "east", tok)
	harness.WaitReady(t, s.url("/healthz/ready"), 30*time.Second)
	a.waitSynced(t, "default/east")
	if out := mustNavectl(t, append([]string{"token", "list"}, a.stateFlags()...)...); !strings.Contains(out, "used") {
		t.Errorf("navectl token list after the enrollment:\n%s", out)
	}

	// Hub B restarted: the same serving CA, the enrolled cluster, and the
	// spoke's certificate is good there.
	b.proc.Stop(10 * time.Second)
	b.start()
	if got := servedCAPin(t, b); got != pin {
		t.Fatalf("restarted hub B serves a chain up to %s, want %s", got, pin)
	}
	var view struct {
		ServingCA string                 `json:"servingCA"`
		Clusters  []enroll.ClusterRecord `json:"clusters"`
	}
	if err := harness.GetJSON(b.url("/debug/security"), &view); err != nil {
		t.Fatal(err)
	}
	if view.ServingCA != "nave-system/nave-serving-ca-hub" || len(view.Clusters) != 1 || view.Clusters[0].Identity().String() != "default/east" {
		t.Fatalf("hub B's /debug/security = %+v; want default/east enrolled and the serving CA's Secret", view)
	}
	creds, err := spokeenroll.Load(s.state)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := pushClaiming(t, dialTLS(t, addr(b.spokes), roots, &creds.Certificate), "default", "east")
	if err != nil || ack.GetErrorDetail() != nil {
		t.Fatalf("hub B and the certificate hub A issued: %v, %v", ack, err)
	}

	// A revocation written by navectl reaches both hubs through the
	// Secrets: A withdraws the cluster, B refuses it.
	mustNavectl(t, append([]string{"cluster", "revoke", "--mesh", "default", "--cluster", "east"}, a.stateFlags()...)...)
	testwait.For(t, 10*time.Second, func() error {
		if _, ok := a.spokesView(t)["default/east"]; ok {
			return fmt.Errorf("hub A still holds default/east")
		}
		return nil
	})
	_, err = pushClaiming(t, dialTLS(t, addr(b.spokes), roots, &creds.Certificate), "default", "east")
	wantCode(t, "hub B and the revoked cluster", err, codes.PermissionDenied, "revoked")

	for name, h := range map[string]*hub{"A": a, "B": b} {
		if entries, err := os.ReadDir(h.state); err != nil || len(entries) != 0 {
			t.Errorf("hub %s's state dir holds %v (%v); want nothing: its state is in the Secrets", name, entries, err)
		}
	}
}

// servedCAPin is the pin of the CA in the chain h's spokes listener
// serves.
func servedCAPin(t *testing.T, h *hub) string {
	t.Helper()
	conn, err := tls.Dial("tcp", addr(h.spokes), &tls.Config{InsecureSkipVerify: true}) // only reads the chain
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	chain := conn.ConnectionState().PeerCertificates
	if len(chain) < 2 {
		t.Fatalf("the hub's chain has %d certificates; want its serving CA in it", len(chain))
	}
	return tlspin.Hash(chain[len(chain)-1])
}
