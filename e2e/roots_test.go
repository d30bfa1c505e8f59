package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/shared/typeurl"
)

// grpcReload is how long grpc-go may take to read the agent's files again
// (the file_watcher refresh_interval the agent writes, 10 s) plus a
// margin: a rotation step may only be taken once every workload's grpc
// holds what the agents wrote. It is a property of grpc's file watcher
// that the procedure respects, not a performance bound.
const grpcReload = 16 * time.Second

// rootsIn returns the certificates of a PEM file.
func rootsIn(t *testing.T, path string) []*x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []*x509.Certificate
	for rest := b; ; {
		var blk *pem.Block
		if blk, rest = pem.Decode(rest); blk == nil {
			return out
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, c)
	}
}

// chainsTo reports whether the leaf of the agent's cert-chain.pem in dir
// chains to root.
func chainsTo(t *testing.T, dir string, root []byte) bool {
	t.Helper()
	chain := rootsIn(t, filepath.Join(dir, "cert-chain.pem"))
	if len(chain) == 0 {
		return false
	}
	pool, inter := x509.NewCertPool(), x509.NewCertPool()
	pool.AppendCertsFromPEM(root)
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err == nil
}

// waitRoots waits until every dir's root-cert.pem holds n roots.
func waitRoots(t *testing.T, n int, dirs ...string) {
	t.Helper()
	testwait.For(t, 60*time.Second, func() error {
		for _, d := range dirs {
			if got := len(rootsIn(t, filepath.Join(d, "root-cert.pem"))); got != n {
				return fmt.Errorf("%s holds %d roots, want %d", d, got, n)
			}
		}
		return nil
	})
}

// allOK fails on any call of c that did not succeed, and returns how many
// there were.
func allOK(t *testing.T, name string, c *client) int {
	t.Helper()
	calls := c.calls()
	for _, cl := range calls {
		if cl.Code != "OK" {
			t.Fatalf("%s: call %d at %s failed: %s %s", name, cl.Seq, cl.Time.Format(time.RFC3339Nano), cl.Code, cl.Error)
		}
	}
	return len(calls)
}

// TestRootRotation runs the three steps of a mesh root rotation
// (navectl roots add, switch, drop: docs/operate.md) against a real hub,
// spoke and API server, with nave-agents in grpc mode and grpc-go xDS
// servers and clients talking mTLS through them:
//
//   - a client calls a server continuously through the three steps: no
//     call fails, and no process restarts;
//   - after add, the agents hand the workloads both roots; an "old"
//     workload started then (ra.rootsRefresh 0: it keeps its certificate
//     of the old root) keeps calling the server after the switch, when the
//     server's certificate chains to the new root; a workload started
//     after the switch, with only the old root in its pod's env, gets a
//     certificate of the new root and calls the server too;
//   - after drop, the workloads trust the new root alone, and the old
//     workload's certificate is refused by the hub.
func TestRootRotation(t *testing.T) {
	// Spokes renew their cluster certificates (the RA's) at 70-80 % of
	// their life: 1 m here, so that the RA presents one of the new root
	// soon after the switch.
	a, h, raAddr, lis := agentWorld(t, "--ca.refresh-interval", "1s", "--ca.cluster-cert-ttl", "1m")
	state := []string{"--state-dir", h.state, "--mesh", "default"}
	roots := func(args ...string) (string, error) {
		return navectl(t, append(append([]string{"roots"}, args...), state...)...)
	}
	refresh := []string{"NAVE_RA_ROOTS_REFRESH=2s"}
	server := startAgent(t, a, h, raAddr, podEnv{name: "echo-1", namespace: "demo", sa: "server", mode: "grpc", labels: map[string]string{"app": "echo"}, extra: refresh})
	cl := startAgent(t, a, h, raAddr, podEnv{name: "client-1", namespace: "demo", sa: "client", mode: "grpc", labels: map[string]string{"app": "client"}, extra: refresh})
	boot, err := os.ReadFile(filepath.Join(server.dir, "grpc-bootstrap.json"))
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, lis, boot)
	const target = "xds:///echo.demo.svc.cluster.local:7070"
	callFrom := func(name string, p *agentProc) *client {
		return &client{proc: harness.Start(t, name, binary("nave-demo-client"), "--target", target,
			"--bootstrap", filepath.Join(p.dir, "grpc-bootstrap.json"), "--interval", "50ms", "--timeout", "5s", "--json")}
	}
	steady := callFrom("client-steady", cl)
	steady.lastCalls(t, 5)
	allOK(t, "steady client", steady)
	oldRoot := a.meshRoot
	hubMetric := func(want string) {
		t.Helper()
		testwait.For(t, 30*time.Second, func() error {
			m, err := httpGet(fmt.Sprintf("http://127.0.0.1:%d/metrics", h.admin))
			if err != nil {
				return err
			}
			if !strings.Contains(m, want) {
				return fmt.Errorf("hub metrics lack %q", want)
			}
			return nil
		})
	}

	// Step 1: add. The hub takes it up without a restart and the agents
	// hand both roots to their workloads.
	if _, err := roots("switch", "--force"); err == nil || !strings.Contains(err.Error(), "no new root was added") {
		t.Fatalf("switch before add: %v", err)
	}
	if _, err := roots("add"); err != nil {
		t.Fatal(err)
	}
	hubMetric(`nave_hub_ca_rotation_phase{mesh="default"} 1`)
	hubMetric(`nave_hub_ca_roots{mesh="default"} 2`)
	waitRoots(t, 2, server.dir, cl.dir)
	distributed := time.Now()
	var newRoot []byte
	for _, r := range rootsIn(t, filepath.Join(cl.dir, "root-cert.pem")) {
		if p := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.Raw}); string(p) != string(oldRoot) {
			newRoot = p
		}
	}
	if newRoot == nil {
		t.Fatal("the bundle does not hold a root besides the old one")
	}
	old := startAgent(t, a, h, raAddr, podEnv{name: "client-old", namespace: "demo", sa: "client", mode: "grpc", labels: map[string]string{"app": "client"},
		extra: []string{"NAVE_RA_ROOTS_REFRESH=0s"}})
	if !chainsTo(t, old.dir, oldRoot) {
		t.Fatal("before the switch, a new certificate does not chain to the old root")
	}
	oldCalls := callFrom("client-old", old)
	oldCalls.lastCalls(t, 3)

	// Step 2: switch, once every workload's grpc read the bundle.
	testwait.For(t, 60*time.Second, func() error {
		if time.Since(distributed) < grpcReload {
			return fmt.Errorf("the workloads' grpc may not have read the bundle yet")
		}
		return nil
	})
	if _, err := roots("switch", "--min-distribution", "0s"); err != nil {
		t.Fatal(err)
	}
	hubMetric(`nave_hub_ca_rotation_phase{mesh="default"} 2`)
	testwait.For(t, 60*time.Second, func() error {
		for _, d := range []string{server.dir, cl.dir} {
			if !chainsTo(t, d, newRoot) {
				return fmt.Errorf("%s's certificate does not chain to the new root yet", d)
			}
		}
		return nil
	})
	reissued := time.Now()
	// A workload created now, whose pod env holds the old root only.
	fresh := startAgent(t, a, h, raAddr, podEnv{name: "client-new", namespace: "demo", sa: "client", mode: "grpc", labels: map[string]string{"app": "client"}, extra: refresh})
	if !chainsTo(t, fresh.dir, newRoot) || chainsTo(t, fresh.dir, oldRoot) {
		t.Fatal("after the switch, a new workload's certificate does not chain to the new root alone")
	}
	freshCalls := callFrom("client-new", fresh)
	for _, c := range freshCalls.lastCalls(t, 3) {
		if c.Code != "OK" {
			t.Fatalf("the new workload's call: %+v", c)
		}
	}
	// The old workload (a certificate of the old root) and the server (of
	// the new root, read by its grpc) still talk.
	testwait.For(t, 60*time.Second, func() error {
		if time.Since(reissued) < grpcReload {
			return fmt.Errorf("the server's grpc may not present its new certificate yet")
		}
		return nil
	})
	oldCalls.lastCalls(t, 3)
	if !chainsTo(t, old.dir, oldRoot) {
		t.Fatal("the old workload's certificate was replaced; the test means it to keep the old root's")
	}
	n := allOK(t, "old-root client", oldCalls)
	oldCalls.proc.Stop(10 * time.Second)
	old.proc.Stop(10 * time.Second)
	t.Logf("the old-root client made %d calls, all OK", n)

	// The spoke renewed its cluster certificate under the new root: the
	// RA presents it.
	testwait.For(t, 90*time.Second, func() error {
		conn, err := tls.Dial("tcp", raAddr, &tls.Config{InsecureSkipVerify: true}) // inspected below
		if err != nil {
			return err
		}
		defer conn.Close()
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(newRoot)
		certs := conn.ConnectionState().PeerCertificates
		inter := x509.NewCertPool()
		for _, c := range certs[1:] {
			inter.AddCert(c)
		}
		if _, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			return fmt.Errorf("the RA's certificate does not chain to the new root yet: %v", err)
		}
		return nil
	})

	// Step 3: drop (forced: workload certificates live 24 h; every one in
	// use was reissued and the old workload is gone). The workloads trust
	// the new root alone.
	if _, err := roots("drop"); err == nil || !strings.Contains(err.Error(), "may be valid until") {
		t.Fatalf("drop right after the switch: %v", err)
	}
	if _, err := roots("drop", "--force"); err != nil {
		t.Fatal(err)
	}
	hubMetric(`nave_hub_ca_roots{mesh="default"} 1`)
	waitRoots(t, 1, server.dir, cl.dir, fresh.dir)
	dropped := time.Now()
	testwait.For(t, 60*time.Second, func() error {
		if time.Since(dropped) < grpcReload {
			return fmt.Errorf("the workloads' grpc may not have read the bundle yet")
		}
		return nil
	})
	steady.lastCalls(t, 5)
	if out, err := roots("status"); err != nil || !strings.Contains(out, "phase none") {
		t.Fatalf("status after drop: %q, %v", out, err)
	}

	// The old workload's certificate is refused by the hub; a current one
	// is served.
	xdsWith := func(dir string) error {
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "cert-chain.pem"), filepath.Join(dir, "key.pem"))
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		ads, err := discoveryv3.NewAggregatedDiscoveryServiceClient(dialTLS(t, addr(h.xds), h.servingRoots(t), &pair)).StreamAggregatedResources(ctx)
		if err != nil {
			return err
		}
		node := &corev3.Node{Id: "sidecar~127.0.0.1~client-1.demo~demo.svc.cluster.local"}
		if err := ads.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typeurl.Cluster}); err != nil {
			return err
		}
		_, err = ads.Recv()
		return err
	}
	if err := xdsWith(old.dir); err == nil || !strings.Contains(err.Error(), "Unauthenticated") {
		t.Fatalf("the hub with a certificate of the dropped root: %v; want Unauthenticated", err)
	}
	if err := xdsWith(cl.dir); err != nil {
		t.Fatalf("the hub with a certificate of the new root: %v", err)
	}
	t.Logf("the steady client made %d calls through the rotation, all OK", allOK(t, "steady client", steady))
	allOK(t, "new client", freshCalls)
}
