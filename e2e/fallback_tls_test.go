package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/hub/enroll/enrolltest"
	"github.com/navemesh/nave/hub/servingcert"
	"github.com/navemesh/nave/internal/testwait"
	nagent "github.com/navemesh/nave/spoke/agent"
	"github.com/navemesh/nave/spoke/agentconfig"
)

// An enrolled nave-spoke with fallback on serves its fallback listener
// over mTLS with its cluster certificate: a proxy verifies it against the
// mesh roots and the cluster's SPIFFE ID; a proxy without a workload
// certificate of the mesh cannot connect; one with it is answered
// UNAVAILABLE while the hub serves.
func TestFallbackListenerServesTheClusterCertificate(t *testing.T) {
	h := enrolltest.StartHub(t, enrolltest.HubOptions{})
	token, _ := tokenFile(t, h, enrolltest.MeshA, "east")
	fb := addr(harness.FreePort(t))
	startIdentitySpoke(t, append(tlsArgs(h, "east", t.TempDir()), "--hub.token-file="+token,
		"--fallback.enabled", "--fallback.listen="+fb)...)
	hubHolds(t, h, "east")

	meshCA := h.CA.Authority(enrolltest.MeshA)
	var served *x509.Certificate
	dial := func(certs []tls.Certificate) error {
		cfg := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: certs, InsecureSkipVerify: true,
			VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
				leaf, err := x509.ParseCertificate(raw[0])
				if err != nil {
					return err
				}
				inter := x509.NewCertPool()
				for _, r := range raw[1:] {
					if c, err := x509.ParseCertificate(r); err == nil {
						inter.AddCert(c)
					}
				}
				if _, err := leaf.Verify(x509.VerifyOptions{Roots: meshCA.Pool(), Intermediates: inter}); err != nil {
					return err
				}
				served = leaf
				return nil
			}}
		conn, err := grpc.NewClient(fb, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), identityWait)
		defer cancel()
		stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		if err != nil {
			return err
		}
		_, err = stream.Recv()
		return err
	}
	workload, _ := url.Parse("spiffe://" + enrolltest.TrustDomainA + "/ns/demo/sa/client")
	testwait.For(t, identityWait, func() error {
		err := dial([]tls.Certificate{meshCA.ClientCert(time.Hour, workload)})
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "hub is serving") {
			return fmt.Errorf("workload of the mesh: err = %v, want UNAVAILABLE while the hub serves", err)
		}
		return nil
	})
	if served == nil || len(served.URIs) != 1 || served.URIs[0].String() != "spiffe://"+enrolltest.TrustDomainA+"/nave/cluster/east" {
		t.Fatalf("fallback listener serves %v, want the cluster certificate", served)
	}
	if err := dial(nil); err == nil || status.Code(err) == codes.Unavailable && strings.Contains(err.Error(), "hub is serving") {
		t.Fatalf("no client certificate: err = %v, want a refused handshake", err)
	}
	foreign := enrolltest.NewCA().AddMesh("other", "other.example")
	if err := dial([]tls.Certificate{foreign.ClientCert(time.Hour, workload)}); err == nil || strings.Contains(err.Error(), "hub is serving") {
		t.Fatalf("foreign CA's certificate: err = %v, want a refused handshake", err)
	}
}

// agentClient is a proxyless client whose bootstrap nave-agent (grpc mode)
// would write: the hub over TLS verified with the hub's serving CA, the
// spoke's fallback server second, verified with the mesh roots; both with
// the workload certificate of demo/client.
type agentClient struct {
	*client
	nodeID string
}

func startAgentClient(t *testing.T, h *hub, cluster, name, fallback string, cert tls.Certificate, rootsPEM []byte) *agentClient {
	t.Helper()
	dir := t.TempDir()
	hubCA, err := os.ReadFile(servingcert.RootPath(h.state))
	if err != nil {
		t.Fatal(err)
	}
	var chain []byte
	for _, der := range cert.Certificate {
		chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	cfg := agentconfig.Config{Mode: agentconfig.ModeGRPC, Mesh: "default", Cluster: cluster, TrustDomain: "cluster.local", DomainSuffix: "cluster.local",
		Pod:   agentconfig.Pod{Name: name, Namespace: "demo", ServiceAccount: "client"},
		Trust: agentconfig.Trust{HubCA: string(hubCA), MeshRoots: string(rootsPEM)},
		XDS:   agentconfig.XDS{Address: "localhost:" + strconv.Itoa(h.xds), FallbackAddress: fallback}, Dir: dir}
	// The files nave-agent writes in grpc mode.
	for file, data := range map[string][]byte{nagent.HubCAFile: []byte(nagent.XDSRoots(cfg)), nagent.RootCertFile: rootsPEM, nagent.CertChainFile: chain,
		nagent.KeyFile: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})} {
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	doc, err := nagent.Bootstrap(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "grpc-bootstrap.json")
	if err := os.WriteFile(path, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	return &agentClient{nodeID: nagent.Workload(cfg, nil, nil).NodeID(cfg.DomainSuffix), client: &client{proc: harness.Start(t, "client-"+name,
		binary("nave-demo-client"), "--target", "xds:///"+echoHost+":7070", "--bootstrap", path, "--interval", "5ms", "--timeout", "2s", "--json")}}
}

// meshRootsPEM are the roots of the hub's CA for mesh (td its trust domain).
func meshRootsPEM(t *testing.T, h *hub, mesh, td string) []byte {
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
	roots, err := auth.RootsPEM(mesh)
	if err != nil {
		t.Fatal(err)
	}
	return roots
}

// hubServes waits until the hub's /debug/syncz lists node.
func hubServes(t *testing.T, h *hub, node string) {
	t.Helper()
	testwait.For(t, 30*time.Second, func() error {
		var s syncz
		if err := harness.GetJSON(h.url("/debug/syncz"), &s); err != nil {
			return err
		}
		for _, c := range s {
			if c.NodeID == node {
				return nil
			}
		}
		return fmt.Errorf("%s not connected to the hub", node)
	})
}

// TestFallbackOverTLS is TestFallback's outage with TLS everywhere: spokes
// enrolled with join tokens, proxyless clients with the bootstrap
// nave-agent writes and a workload certificate. The hub is dialled as
// localhost (its only tls.hosts name), spoke a's fallback server as
// 127.0.0.1, which its cluster certificate names (fallback.serverNames),
// so grpc-go's tls channel credentials accept both with the agent's CA
// file (the hub's serving CA and the mesh roots). Calls go on through the
// outage, a client started during it gets its config from spoke a over
// mTLS, and everyone returns to the hub. A spoke asking for a name of the
// hub is refused.
func TestFallbackOverTLS(t *testing.T) {
	av1, bv2 := startBackend(t, "a-v1"), startBackend(t, "b-v2")
	h := newSecureHub(t, "--tls.hosts", "localhost")
	fallbackFlags := func(port int) []string {
		return []string{"--hub.server-name", "localhost", "--fallback.enabled", "--fallback.listen", addr(port), "--fallback.after", "1s",
			"--fallback.hand-back-after", "3s", "--fallback.drain", "1s", "--fallback.server-names", "127.0.0.1"}
	}
	fbA := harness.FreePort(t)
	spA := startEnrolledSpoke(t, h, "spoke-a", "", "a", echoIn(map[string]*backend{"v1": av1})+"---\n"+fallbackRoute(map[string]int{"v1": 50, "v2": 50}),
		h.token(t, "default", "a", "1h"), t.TempDir(), fallbackFlags(fbA)...)
	spB := startEnrolledSpoke(t, h, "spoke-b", "", "b", echoIn(map[string]*backend{"v2": bv2}), h.token(t, "default", "b", "1h"), t.TempDir(),
		fallbackFlags(harness.FreePort(t))...)
	harness.WaitReady(t, spB.url("/healthz/ready"), 30*time.Second)
	harness.WaitReady(t, spA.url("/healthz/ready"), 30*time.Second)
	testwait.For(t, 30*time.Second, func() error {
		if st := spA.fallbackStatus(t); !st.Remote.Complete || st.Remote.Clusters["b"] != 2 {
			return fmt.Errorf("spoke a's remote view: %+v", st.Remote)
		}
		return nil
	})

	cert := h.workloadCert(t, "default", "cluster.local", "demo", "client")
	roots := meshRootsPEM(t, h, "default", "cluster.local")
	fallback := addr(fbA)
	old := startAgentClient(t, h, "a", "old", fallback, cert, roots)
	firstOld := firstOK(t, old.client, 30*time.Second)
	if got := tally(old.collect(t, firstOld, 200, 30*time.Second)); got["a-v1"] == 0 || got["b-v2"] == 0 {
		t.Fatalf("before the outage: %s, want both clusters", describe(got))
	}

	h.proc.Kill()
	down := time.Now()
	testwait.For(t, 20*time.Second, func() error {
		if !spA.fallbackStatus(t).Active {
			return fmt.Errorf("spoke a not in fallback yet")
		}
		return nil
	})
	if got := tally(old.collect(t, down, 300, 30*time.Second)); got["a-v1"]+got["b-v2"] != 300 || got["b-v2"] == 0 {
		t.Fatalf("old client during the outage: %s, want both clusters and no failure", describe(got))
	}
	started := time.Now()
	fresh := startAgentClient(t, h, "a", "fresh", fallback, cert, roots)
	firstFresh := firstOK(t, fresh.client, 30*time.Second)
	t.Logf("client started during the outage -> first OK call (via spoke a, mTLS): %s", firstFresh.Sub(started).Round(time.Millisecond))
	if got := tally(fresh.collect(t, firstFresh, 200, 30*time.Second)); got["a-v1"] == 0 || got["b-v2"] == 0 {
		t.Fatalf("fresh client during the outage: %s, want both clusters", describe(got))
	}
	if st := spA.fallbackStatus(t); st.Proxies < 1 {
		t.Fatalf("spoke a serves no proxy: %+v", st)
	}

	h.start()
	back := time.Now()
	hubServes(t, h, fresh.nodeID)
	t.Logf("hub back -> fresh client connected to the hub: %s", time.Since(back).Round(time.Millisecond))
	testwait.For(t, 30*time.Second, func() error {
		if st := spA.fallbackStatus(t); st.Active || st.Transitions != 2 || st.Proxies != 0 {
			return fmt.Errorf("spoke a: %+v", st)
		}
		return nil
	})
	// A spoke asking for a name of the hub for its fallback server is
	// refused: the agent's CA file trusts the mesh roots for the hub too.
	rogue := startEnrolledSpoke(t, h, "spoke-rogue", "", "c", "", h.token(t, "default", "c", "1h"), t.TempDir(),
		"--hub.server-name", "localhost", "--fallback.enabled", "--fallback.listen", addr(harness.FreePort(t)), "--fallback.server-names", "localhost")
	waitExit(t, rogue.proc, "a name of the hub (tls.hosts)")

	for name, c := range map[string]struct {
		c    *agentClient
		from time.Time
	}{"old": {old, firstOld}, "fresh": {fresh, firstFresh}} {
		if f := failuresSince(c.c.calls(), c.from); len(f) > 0 {
			t.Errorf("%s client: %d failed calls since its first successful one, first %+v", name, len(f), f[0])
		}
	}
}
