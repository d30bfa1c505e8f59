package e2e

// Harness: the nave-hub process (plaintext or with a state dir), its
// navectl, operator access and the debug views tests read of it
// (/debug/spokes, /debug/replicas, /debug/endpoints, /debug/syncz).

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/hub/replica"
	"github.com/navemesh/nave/hub/servingcert"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/xds/mesh"
)

// hub is a nave-hub process on fixed loopback ports (so it can be restarted
// on the same ones).
type hub struct {
	t                  testing.TB
	admin, spokes, xds int
	proc               *harness.Proc
	extraArgs          []string
	// state is the state dir of a hub serving TLS (newSecureHub); ""
	// runs it in plaintext mode, with plainState as its state dir (made
	// at the first start, kept across restarts: the clusters it
	// remembers).
	state, plainState string
	// navectlState are the navectl flags that reach the hub's state;
	// nil: --state-dir state.
	navectlState []string
	// ns, if set, is the network namespace the hub runs in; host is the
	// address its admin, spokes and xds listeners bind (default 127.0.0.1).
	ns   *harness.NetNS
	host string
}

func newHub(t testing.TB, extra ...string) *hub {
	h := &hub{t: t, admin: harness.FreePort(t), spokes: harness.FreePort(t), xds: harness.FreePort(t), extraArgs: extra}
	h.start()
	return h
}

func (h *hub) start() {
	h.t.Helper()
	h.launch()
	h.waitReady()
}

// launch starts the hub process without waiting for it.
func (h *hub) launch() {
	h.t.Helper()
	args := append([]string{
		"--admin.listen", h.at(h.admin), "--spokes.listen", h.at(h.spokes), "--xds.listen", h.at(h.xds),
		"--log.level", "debug", "--push.verify-incremental",
	}, h.extraArgs...)
	if h.state == "" {
		if h.plainState == "" {
			h.plainState = h.t.TempDir()
		}
		args = append(args, "--tls.plaintext", "--state.dir", h.plainState)
	} else {
		args = append(args, "--state.dir", h.state)
	}
	if h.ns != nil {
		h.proc = h.ns.Start(h.t, "hub", binary("nave-hub"), args...)
		return
	}
	h.proc = harness.Start(h.t, "hub", binary("nave-hub"), args...)
}

// at is host:port on the hub's listen host.
func (h *hub) at(port int) string {
	if h.host == "" {
		return addr(port)
	}
	return net.JoinHostPort(h.host, strconv.Itoa(port))
}

// waitReady waits until the hub reports ready.
func (h *hub) waitReady() {
	h.t.Helper()
	harness.WaitReady(h.t, h.url("/healthz/ready"), 20*time.Second)
}

func (h *hub) url(path string) string { return "http://" + h.at(h.admin) + path }

func addr(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }

// newSecureHub starts a hub serving TLS (the default) with a state dir of
// its own, and the meshes default (cluster.local) and other
// (other.example); extra are more flags.
func newSecureHub(t testing.TB, extra ...string) *hub {
	t.Helper()
	h := &hub{t: t, admin: harness.FreePort(t), spokes: harness.FreePort(t), xds: harness.FreePort(t),
		state: t.TempDir(), extraArgs: append([]string{"--ca.meshes", "default=cluster.local,other=other.example"}, extra...)}
	h.start()
	return h
}

// navectl runs the navectl binary and returns its standard output.
func navectl(t testing.TB, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, binary("navectl"), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("navectl %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

func mustNavectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := navectl(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// token creates a join token for (mesh, cluster).
func (h *hub) token(t testing.TB, mesh, cluster, ttl string) string {
	t.Helper()
	return mustNavectl(t, append([]string{"token", "create", "--mesh", mesh, "--cluster", cluster, "--ttl", ttl}, h.stateFlags()...)...)
}

// pin is the pin of the hub's serving CA, as an operator gives it to spokes.
func (h *hub) pin(t testing.TB) string {
	t.Helper()
	if h.navectlState != nil {
		return mustNavectl(t, append([]string{"ca-hash"}, h.navectlState...)...)
	}
	return mustNavectl(t, "ca-hash", servingcert.RootPath(h.state))
}

// stateFlags are the navectl flags that reach the hub's state.
func (h *hub) stateFlags() []string {
	if h.navectlState != nil {
		return h.navectlState
	}
	return []string{"--state-dir", h.state}
}

// servingRoots is the hub's serving CA as a pool.
func (h *hub) servingRoots(t *testing.T) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(servingcert.RootPath(h.state))
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		t.Fatal("no serving CA")
	}
	return p
}

// spokes is the hub's /debug/spokes by "mesh/cluster".
func (h *hub) spokesView(t testing.TB) map[string]ingest.ClusterStatus {
	t.Helper()
	var list []ingest.ClusterStatus
	if err := harness.GetJSON(h.url("/debug/spokes"), &list); err != nil {
		t.Fatal(err)
	}
	out := map[string]ingest.ClusterStatus{}
	for _, c := range list {
		out[c.ClusterIdentity.String()] = c
	}
	return out
}

// waitSynced waits until the hub holds id connected and synced.
func (h *hub) waitSynced(t testing.TB, id string) ingest.ClusterStatus {
	t.Helper()
	var st ingest.ClusterStatus
	testwait.For(t, 30*time.Second, func() error {
		c, ok := h.spokesView(t)[id]
		if !ok || !c.Connected || !c.Synced {
			return fmt.Errorf("%s: %+v (present %v)", id, c, ok)
		}
		st = c
		return nil
	})
	return st
}

// workloadCert issues a workload certificate for spiffe://<td>/ns/ns/sa/sa
// from mesh's CA in the hub's state dir, as `navectl cert issue` does.
func (h *hub) workloadCert(t *testing.T, mesh, td, ns, sa string) tls.Certificate {
	t.Helper()
	store, err := ca.NewDirStore(filepath.Join(h.state, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	auth, err := ca.New(store, ca.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := auth.Load(context.Background(), ca.Mesh{Name: mesh, TrustDomain: td}); err != nil {
		t.Fatal(err)
	}
	id, err := ca.WorkloadID(td, ns, sa)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	u, _ := url.Parse(id.String())
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{u}}, key)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := auth.Sign(context.Background(), mesh, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), ca.SignOptions{Identities: []ca.ID{id}})
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
	cert, err := tls.X509KeyPair(chain, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// replicasView is a replica's /debug/replicas.
type replicasView struct {
	Self    string           `json:"self"`
	Leader  string           `json:"leader"`
	Members []replica.Member `json:"members"`
	Relays  []replica.RelayStatus
	Spokes  replica.SpokeBalance `json:"spokes"`
}

func (h *hub) replicas(t *testing.T) replicasView {
	t.Helper()
	var v replicasView
	if err := harness.GetJSON(h.url("/debug/replicas"), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func (v replicasView) ids() string {
	var out []string
	for _, m := range v.Members {
		out = append(out, m.ID)
	}
	return strings.Join(out, ",")
}

// waitMembers waits until h sees exactly ids (self first, then sorted).
func (h *hub) waitMembers(t *testing.T, ids string) {
	t.Helper()
	testwait.For(t, 30*time.Second, func() error {
		if got := h.replicas(t).ids(); got != ids {
			return fmt.Errorf("members %s, want %s", got, ids)
		}
		return nil
	})
}

// waitOwned waits until h holds id connected and synced from its own
// spoke, and returns when that was seen.
func (h *hub) waitOwned(t *testing.T, id, self string) ingest.ClusterStatus {
	t.Helper()
	var st ingest.ClusterStatus
	testwait.For(t, 60*time.Second, func() error {
		var list []ingest.ClusterStatus
		if err := harness.GetJSON(h.url("/debug/spokes"), &list); err != nil {
			return err
		}
		for _, c := range list {
			if c.ClusterIdentity.String() == id && c.Connected && c.Synced && !c.Relayed && c.Owner == self {
				st = c
				return nil
			}
		}
		return fmt.Errorf("%s does not own %s yet", self, id)
	})
	return st
}

// navectlExit runs navectl and returns its exit code and outputs.
func navectlExit(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary("navectl"), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String(), errb.String()
	} else if err != nil {
		t.Fatalf("navectl %v: %v", args, err)
	}
	return 0, out.String(), errb.String()
}

// waitOneMesh waits until the hub holds one mesh merged from n clusters.
func waitOneMesh(t *testing.T, h *hub, n int) {
	t.Helper()
	testwait.For(t, 20*time.Second, func() error {
		var meshes []struct {
			Clusters []mesh.ClusterState `json:"clusters"`
		}
		if err := harness.GetJSON(h.url("/debug/meshes"), &meshes); err != nil {
			return err
		}
		if len(meshes) != 1 || len(meshes[0].Clusters) != n {
			return fmt.Errorf("meshes %+v, want one with %d clusters", meshes, n)
		}
		return nil
	})
}

// operatorClient is an HTTPS client of the hub's operator listener
// presenting cert (none if nil) and verifying the hub's serving CA.
func operatorClient(t *testing.T, h *hub, cert *tls.Certificate) *http.Client {
	t.Helper()
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: h.servingRoots(t)}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

// get fetches url, returning the status code and body, or the transport
// error (a refused handshake).
func get(c *http.Client, url string) (int, string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// issueOperator runs navectl operator issue and loads the certificate.
func issueOperator(t *testing.T, h *hub, scope ...string) (string, tls.Certificate) {
	t.Helper()
	dir := t.TempDir()
	mustNavectl(t, append([]string{"operator", "issue", "--state-dir", h.state, "--out", dir}, scope...)...)
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "cert-chain.pem"), filepath.Join(dir, "key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	return dir, cert
}

type debugEndpoint struct {
	Address  string            `json:"address"`
	Ports    map[string]uint32 `json:"ports"`
	Labels   map[string]string `json:"labels"`
	Cluster  string            `json:"cluster"`
	Health   string            `json:"health"`
	Locality struct {
		Region string `json:"region"`
		Zone   string `json:"zone"`
	} `json:"locality"`
}

type debugService struct {
	Hostname  string          `json:"hostname"`
	Endpoints []debugEndpoint `json:"endpoints"`
}

// hubEndpoints returns what the hub's /debug/services shows for host, as
// "cluster/version/port/health/region/zone" strings, sorted.
func hubEndpoints(h *hub, host string) ([]string, error) {
	var all map[string][]debugService
	if err := harness.GetJSON(h.url("/debug/services?mesh=default"), &all); err != nil {
		return nil, err
	}
	for _, s := range all["default"] {
		if s.Hostname != host {
			continue
		}
		var out []string
		for _, e := range s.Endpoints {
			out = append(out, fmt.Sprintf("%s/%s/%d/%s/%s/%s", e.Cluster, e.Labels["version"], e.Ports["grpc"], e.Health, e.Locality.Region, e.Locality.Zone))
		}
		sort.Strings(out)
		return out, nil
	}
	return nil, fmt.Errorf("hub has no service %s", host)
}

func waitEndpoints(t *testing.T, h *hub, host string, want ...string) {
	t.Helper()
	sort.Strings(want)
	testwait.For(t, 30*time.Second, func() error {
		got, err := hubEndpoints(h, host)
		if err != nil {
			return err
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			return fmt.Errorf("hub endpoints of %s: %v, want %v", host, got, want)
		}
		return nil
	})
}

type syncz []struct {
	NodeID string `json:"nodeId"`
	Types  map[string]struct {
		SentVersion  string `json:"sentVersion"`
		AckedVersion string `json:"ackedVersion"`
		NackReason   string `json:"nackReason"`
	} `json:"types"`
}

// routeVersion is the RDS version the node last ACKed at the hub.
func routeVersion(h *hub, node string) (string, error) {
	var s syncz
	if err := harness.GetJSON(h.url("/debug/syncz"), &s); err != nil {
		return "", err
	}
	for _, c := range s {
		if c.NodeID == node {
			return c.Types["RouteConfiguration"].AckedVersion, nil
		}
	}
	return "", fmt.Errorf("node %s is not connected", node)
}

// spokeSynced checks the hub's view of a cluster: connected and synced
// (want true) or disconnected (want false).
func spokeSynced(h *hub, cluster string, want bool) error {
	var spokes []struct {
		Cluster   string `json:"cluster"`
		Connected bool   `json:"connected"`
		Synced    bool   `json:"synced"`
	}
	if err := harness.GetJSON(h.url("/debug/spokes"), &spokes); err != nil {
		return err
	}
	for _, s := range spokes {
		if s.Cluster == cluster && (s.Connected && s.Synced) == want {
			return nil
		}
	}
	return fmt.Errorf("cluster %s not connected+synced=%v: %+v", cluster, want, spokes)
}
