package e2e

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/hub/replica"
	"github.com/navemesh/nave/internal/testenv"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/xdsbootstrap"
)

// TestReplicaFailoverDeletesNothing runs three hub replicas and two
// enrolled file spokes, each spoke behind a loopback proxy that sends it
// to the first replica that accepts, and a delta ADS client on each
// replica that records every removal it is sent. SIGKILL of the replica
// that owns a spoke: the spoke re-homes to the next replica (the time is
// logged), the clients of the surviving replicas receive no removal, and
// the dead replica's client, reconnecting to a survivor, holds the full
// set and receives no removal either. Then a member without the gossip key
// does not join, and the relay refuses a certificate that is not a
// replica's.
func TestReplicaFailoverDeletesNothing(t *testing.T) {
	const hostA, hostB = "svc-a.demo.svc.cluster.local", "svc-b.demo.svc.cluster.local"
	rs := newReplicaSet(t, 3)
	h0, h1, h2 := rs.hubs[0], rs.hubs[1], rs.hubs[2]
	for _, h := range rs.hubs {
		h.waitMembers(t, map[*hub]string{h0: "hub-0,hub-1,hub-2", h1: "hub-1,hub-0,hub-2", h2: "hub-2,hub-0,hub-1"}[h])
	}

	// c1 lands on hub-0 (then hub-1), c2 on hub-1 (then hub-2).
	p1 := startProxy(t, addr(h0.spokes), addr(h1.spokes), addr(h2.spokes))
	p2 := startProxy(t, addr(h1.spokes), addr(h2.spokes), addr(h0.spokes))
	via := func(p *tcpProxy) *hub { c := *h0; c.spokes = p.port(); return &c }
	startEnrolledSpoke(t, via(p1), "spoke-c1", "", "c1", serviceEntry("svc-a", hostA, 17081), h0.token(t, "default", "c1", "1h"), t.TempDir())
	c2 := startEnrolledSpoke(t, via(p2), "spoke-c2", "", "c2", serviceEntry("svc-b", hostB, 17082), h0.token(t, "default", "c2", "1h"), t.TempDir())
	h0.waitOwned(t, "default/c1", "hub-0")
	h1.waitOwned(t, "default/c2", "hub-1")

	// A delta ADS client on each replica; hub-0's reaches hub-1 once hub-0 is gone.
	roots := h0.servingRoots(t)
	cert := h0.workloadCert(t, "default", "cluster.local", "demo", "watcher")
	xdsVia := []*tcpProxy{startProxy(t, addr(h0.xds), addr(h1.xds)), startProxy(t, addr(h1.xds)), startProxy(t, addr(h2.xds))}
	var dials []func() *grpc.ClientConn
	for _, p := range xdsVia {
		dials = append(dials, func() *grpc.ClientConn { return dialTLS(t, p.addr(), roots, &cert) })
	}
	watchers := startWatchers(t, dials...)
	for i, w := range watchers {
		testwait.For(t, 60*time.Second, func() error {
			if err := w.holds(hostA, hostB); err != nil {
				return fmt.Errorf("client of hub-%d: %v", i, err)
			}
			return nil
		})
	}

	// Steady state: gossip and relay traffic of hub-1 over 3 s.
	g0, r0, t0 := scrape(t, h1.url("/metrics"), "nave_hub_replica_gossip_sent_bytes_total"), scrape(t, h1.url("/metrics"), "nave_hub_replica_relay_sent_bytes_total"), time.Now()
	time.Sleep(3 * time.Second)
	dt := time.Since(t0).Seconds()
	t.Logf("steady state, hub-1 of 3: gossip %.0f B/s, relay %.0f B/s sent",
		(scrape(t, h1.url("/metrics"), "nave_hub_replica_gossip_sent_bytes_total")-g0)/dt, (scrape(t, h1.url("/metrics"), "nave_hub_replica_relay_sent_bytes_total")-r0)/dt)

	// SIGKILL hub-0, c1's owner.
	killed := time.Now()
	h0.proc.Kill()
	<-h0.proc.Done()
	st := h1.waitOwned(t, "default/c1", "hub-1")
	rehome := time.Since(killed)
	var detected time.Duration
	testwait.For(t, 30*time.Second, func() error {
		if got := h1.replicas(t).ids(); got != "hub-1,hub-2" {
			return fmt.Errorf("hub-1 sees %s", got)
		}
		detected = time.Since(killed)
		return nil
	})
	t.Logf("re-home: c1 owned by hub-1 %s after SIGKILL of hub-0 (epoch %s); hub-0 found dead by gossip after %s", rehome.Round(time.Millisecond), st.Epoch, detected.Round(time.Millisecond))
	testwait.For(t, 30*time.Second, func() error {
		view := h2.spokesView(t)
		for _, id := range []string{"default/c1", "default/c2"} {
			if c := view[id]; c.Owner != "hub-1" || !c.Relayed || !c.Synced || !c.Connected {
				return fmt.Errorf("hub-2 does not hold %s relayed from hub-1: %+v", id, c)
			}
		}
		return nil
	})
	testwait.For(t, 30*time.Second, func() error {
		w := watchers[0]
		w.mu.Lock()
		n := w.streams
		w.mu.Unlock()
		if n < 2 {
			return fmt.Errorf("hub-0's client has not been answered by another replica (%d streams)", n)
		}
		return w.holds(hostA, hostB)
	})
	watchers[0].mu.Lock()
	t.Logf("proxy reconnect: hub-0's client answered (and ACKing) on another replica %s after SIGKILL of hub-0", watchers[0].answered.Sub(killed).Round(time.Millisecond))
	watchers[0].mu.Unlock()
	checkNoRemovals(t, watchers, func(i int) string { return fmt.Sprintf("the client of hub-%d", i) }, addService(t, c2.dir))
	for i, w := range watchers {
		if err := w.holds(hostA, hostB); err != nil {
			t.Errorf("client of hub-%d: %v", i, err)
		}
	}

	// A member without the gossip key does not join.
	badKey := filepath.Join(t.TempDir(), "other.key")
	if err := os.WriteFile(badKey, []byte(base64.StdEncoding.EncodeToString([]byte("another key, 32 bytes long......"))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	intruder := &hub{t: t, admin: harness.FreePort(t), spokes: harness.FreePort(t), xds: harness.FreePort(t), state: h0.state,
		extraArgs: []string{"--replicas.id", "intruder", "--replicas.join", addr(rs.gossip[1]), "--replicas.bind-address", "127.0.0.1",
			"--replicas.bind-port", strconv.Itoa(harness.FreePort(t)), "--replicas.relay-listen", addr(harness.FreePort(t)), "--replicas.keyring-file", badKey}}
	refused := strings.Count(h1.proc.Log(), "memberlist: failed to receive")
	intruder.start()
	// The intruder joined through hub-1 as it started (before it was
	// ready): hub-1 refused it.
	testwait.For(t, 30*time.Second, func() error {
		if n := strings.Count(h1.proc.Log(), "memberlist: failed to receive"); n <= refused {
			return errors.New("hub-1 logged no refused gossip connection")
		}
		return nil
	})
	if got := h1.replicas(t).ids(); got != "hub-1,hub-2" {
		t.Errorf("with a member without the key around, hub-1 sees %s", got)
	}
	if got := intruder.replicas(t).ids(); got != "intruder" {
		t.Errorf("the member without the key sees %s", got)
	}
	intruder.proc.Stop(5 * time.Second)

	// The relay takes only replicas' certificates: a workload's is refused.
	conn, err := grpc.NewClient(addr(rs.relay[1]), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		InsecureSkipVerify: true, Certificates: []tls.Certificate{cert}}))) //nolint:gosec // the test checks the server refuses us
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	md := metadata.Pairs(protocol.MetadataMesh, "default", protocol.MetadataCluster, "c9",
		replica.MetadataOwner, "hub-9", replica.MetadataEpoch, ingest.Epoch{At: time.Now().UnixNano(), Replica: "hub-9"}.String())
	rctx, rcancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), 10*time.Second)
	defer rcancel()
	err = func() error {
		s, err := protocolv1.NewSyncClient(conn).Push(rctx)
		if err != nil {
			return err
		}
		if err := s.Send(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: protocol.SyncedTypeURL, Nonce: "1"}); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		_, err = s.Recv()
		return err
	}()
	if err == nil {
		t.Error("the relay accepted a workload's certificate")
	}
	if _, ok := h1.spokesView(t)["default/c9"]; ok {
		t.Error("a relay with a workload's certificate wrote a cluster")
	}
	assertMetricsDocumented(t, h1.url("/metrics"))
	for name, min := range map[string]float64{"nave_hub_replica_failovers_total": 1, "nave_hub_replica_relay_sent_bytes_total": 1,
		"nave_hub_replica_gossip_sent_bytes_total": 1, "nave_hub_replica_relay_refused_total": 1} {
		if v := scrape(t, h1.url("/metrics"), name); v < min {
			t.Errorf("hub-1 %s = %g, want at least %g", name, v, min)
		}
	}
}

// TestReplicaRollingRestartDeletesNothing restarts three hub replicas one
// by one (SIGTERM, start again, wait ready) while the spokes' config
// changes: the delta ADS client on each replica (reaching the next one
// while its own is down) receives no removal, and every change arrives at
// every client.
func TestReplicaRollingRestartDeletesNothing(t *testing.T) {
	rs := newReplicaSet(t, 3)
	hubs := rs.hubs
	p1 := startProxy(t, addr(hubs[0].spokes), addr(hubs[1].spokes), addr(hubs[2].spokes))
	p2 := startProxy(t, addr(hubs[1].spokes), addr(hubs[2].spokes), addr(hubs[0].spokes))
	via := func(p *tcpProxy) *hub { c := *hubs[0]; c.spokes = p.port(); return &c }
	hosts := map[string][]string{"c1": {"svc-a"}, "c2": {"svc-b"}}
	config := func(cluster string) string {
		var docs []string
		for i, n := range hosts[cluster] {
			docs = append(docs, serviceEntry(n, n+".demo.svc.cluster.local", 17100+i))
		}
		return strings.Join(docs, "---\n")
	}
	s1 := startEnrolledSpoke(t, via(p1), "spoke-c1", "", "c1", config("c1"), hubs[0].token(t, "default", "c1", "1h"), t.TempDir())
	s2 := startEnrolledSpoke(t, via(p2), "spoke-c2", "", "c2", config("c2"), hubs[0].token(t, "default", "c2", "1h"), t.TempDir())
	spokeDirs := map[string]string{"c1": s1.dir, "c2": s2.dir}

	roots := hubs[0].servingRoots(t)
	cert := hubs[0].workloadCert(t, "default", "cluster.local", "demo", "watcher")
	var dials []func() *grpc.ClientConn
	for i := range hubs {
		p := startProxy(t, addr(hubs[i].xds), addr(hubs[(i+1)%3].xds))
		dials = append(dials, func() *grpc.ClientConn { return dialTLS(t, p.addr(), roots, &cert) })
	}
	watchers := startWatchers(t, dials...)
	all := func() []string {
		var out []string
		for _, ns := range hosts {
			for _, n := range ns {
				out = append(out, n+".demo.svc.cluster.local")
			}
		}
		return out
	}
	everywhere := func() {
		t.Helper()
		for i, w := range watchers {
			testwait.For(t, 60*time.Second, func() error {
				if err := w.holds(all()...); err != nil {
					return fmt.Errorf("client of hub-%d: %v", i, err)
				}
				return nil
			})
		}
	}
	everywhere()

	for i, h := range hubs {
		start := time.Now()
		h.proc.Stop(10 * time.Second)
		// A config change while the replica is down.
		cluster := []string{"c1", "c2"}[i%2]
		hosts[cluster] = append(hosts[cluster], fmt.Sprintf("svc-%s-%d", cluster, i))
		writeFile(t, filepath.Join(spokeDirs[cluster], "config.yaml"), config(cluster))
		h.start()
		t.Logf("hub-%d restarted and ready in %s", i, time.Since(start).Round(time.Millisecond))
		everywhere()
	}
	checkNoRemovals(t, watchers, func(i int) string { return fmt.Sprintf("the client of hub-%d", i) }, addService(t, s1.dir))
}

// partition cuts ns off from the host (iptables in the namespace drops
// everything on its veth) until heal is called.
func partition(t *testing.T, ns *harness.NetNS) (heal func()) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns.Name, "ip", "-o", "link", "show").CombinedOutput()
	if err != nil {
		t.Fatalf("ip link: %v: %s", err, out)
	}
	var ifname string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], "nv") {
			ifname, _, _ = strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		}
	}
	if ifname == "" {
		t.Fatalf("no veth in %s: %s", ns.Name, out)
	}
	rules := [][]string{{"INPUT", "-i", ifname, "-j", "DROP"}, {"OUTPUT", "-o", ifname, "-j", "DROP"}}
	ipt := func(op string, rule []string) error {
		out, err := exec.Command("ip", append([]string{"netns", "exec", ns.Name, "iptables", op}, rule...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("iptables %s %v: %v: %s", op, rule, err, out)
		}
		return nil
	}
	for _, r := range rules {
		if err := ipt("-I", r); err != nil {
			t.Fatal(err)
		}
	}
	healed := false
	heal = func() {
		if healed {
			return
		}
		healed = true
		for _, r := range rules {
			if err := ipt("-D", r); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(heal)
	return heal
}

// TestReplicaPartitionDeletesNothing runs hub-0 and hub-1 on the host and
// hub-2 in a network namespace with its own spoke, then cuts the namespace
// off for a while: the replicas on each side keep serving what they have
// (the clusters whose relay broke are stale), nothing is withdrawn, and
// after healing the set is whole again and config changes on both sides
// reach every client. No client receives a removal.
func TestReplicaPartitionDeletesNothing(t *testing.T) {
	if os.Getuid() != 0 {
		testenv.Missing(t, "needs root for a network namespace")
	}
	ns := harness.NewNetNS(t)
	rs := newReplicaSetOn(t, []placement{{host: ns.HostIP}, {host: ns.HostIP}, {ns: ns, host: ns.NSIP}}, false, "--replicas.rejoin-interval", "2s")
	hubs := rs.hubs
	for _, h := range hubs {
		testwait.For(t, 30*time.Second, func() error {
			if n := len(h.replicas(t).Members); n != 3 {
				return fmt.Errorf("%d members", n)
			}
			return nil
		})
	}
	hosts := map[string][]string{"c1": {"svc-a"}, "c2": {"svc-b"}}
	config := func(cluster string) string {
		var docs []string
		for i, n := range hosts[cluster] {
			docs = append(docs, serviceEntry(n, n+".demo.svc.cluster.local", 17200+i))
		}
		return strings.Join(docs, "---\n")
	}
	s1 := startEnrolledSpoke(t, hubs[0], "spoke-c1", "", "c1", config("c1"), hubs[0].token(t, "default", "c1", "1h"), t.TempDir())
	s2 := startEnrolledSpoke(t, hubs[2], "spoke-c2", "", "c2", config("c2"), hubs[0].token(t, "default", "c2", "1h"), t.TempDir())
	hubs[0].waitOwned(t, "default/c1", "hub-0")
	hubs[2].waitOwned(t, "default/c2", "hub-2")

	roots := hubs[0].servingRoots(t)
	cert := hubs[0].workloadCert(t, "default", "cluster.local", "demo", "watcher")
	var dials []func() *grpc.ClientConn
	for _, h := range hubs {
		dials = append(dials, func() *grpc.ClientConn { return dialTLS(t, h.at(h.xds), roots, &cert) })
	}
	watchers := startWatchers(t, dials...)
	all := func() []string {
		var out []string
		for _, ns := range hosts {
			for _, n := range ns {
				out = append(out, n+".demo.svc.cluster.local")
			}
		}
		return out
	}
	everywhere := func() {
		t.Helper()
		for i, w := range watchers {
			testwait.For(t, 60*time.Second, func() error {
				if err := w.holds(all()...); err != nil {
					return fmt.Errorf("client of hub-%d: %v", i, err)
				}
				return nil
			})
		}
	}
	everywhere()

	cut := time.Now()
	heal := partition(t, ns)
	hubs[0].waitMembers(t, "hub-0,hub-1")
	t.Logf("partition: hub-2 found dead on the host side after %s", time.Since(cut).Round(time.Millisecond))
	testwait.For(t, 60*time.Second, func() error {
		if c := hubs[0].spokesView(t)["default/c2"]; c.Connected || !c.Stale {
			return fmt.Errorf("hub-0 holds c2 as %+v, want stale", c)
		}
		return nil
	})
	t.Logf("partition: c2 stale on hub-0 after %s", time.Since(cut).Round(time.Millisecond))
	if v := hubs[0].replicas(t); v.Leader != "hub-0" {
		t.Errorf("leader on the host side %s, want hub-0", v.Leader)
	}
	heal()
	healed := time.Now()
	for _, h := range hubs {
		testwait.For(t, 60*time.Second, func() error {
			if n := len(h.replicas(t).Members); n != 3 {
				return fmt.Errorf("%d members", n)
			}
			return nil
		})
	}
	t.Logf("healed: the set is whole again after %s", time.Since(healed).Round(time.Millisecond))

	// Changes on both sides reach every client.
	hosts["c1"] = append(hosts["c1"], "svc-c")
	hosts["c2"] = append(hosts["c2"], "svc-d")
	writeFile(t, filepath.Join(s1.dir, "config.yaml"), config("c1"))
	writeFile(t, filepath.Join(s2.dir, "config.yaml"), config("c2"))
	everywhere()
	testwait.For(t, 60*time.Second, func() error {
		if c := hubs[0].spokesView(t)["default/c2"]; !c.Connected || c.Owner != "hub-2" {
			return fmt.Errorf("hub-0 holds c2 as %+v, want connected, from hub-2", c)
		}
		if c := hubs[2].spokesView(t)["default/c1"]; !c.Connected || c.Owner != "hub-0" {
			return fmt.Errorf("hub-2 holds c1 as %+v, want connected, from hub-0", c)
		}
		return nil
	})
	checkNoRemovals(t, watchers, func(i int) string { return fmt.Sprintf("the client of hub-%d", i) }, addService(t, s2.dir))
}

// TestReplicaShedsProxiesToAJoiningReplica: twelve delta ADS clients reach
// hub-0 through a round-robin load balancer while hub-1 is down; once
// hub-1 has joined and is ready, hub-0 sheds connections until the spread
// is even within the tolerance, the clients reconnect through the balancer,
// and none receives a removal.
func TestReplicaShedsProxiesToAJoiningReplica(t *testing.T) {
	rs := newReplicaSet(t, 2, "--replicas.shed-rate", "4")
	h0, h1 := rs.hubs[0], rs.hubs[1]
	const host = "svc-a.demo.svc.cluster.local"
	sp := startEnrolledSpoke(t, h0, "spoke-c1", "", "c1", serviceEntry("svc-a", host, 17301), h0.token(t, "default", "c1", "1h"), t.TempDir())
	h0.waitOwned(t, "default/c1", "hub-0")
	h1.proc.Stop(10 * time.Second)

	lb := startProxy(t, addr(h0.xds), addr(h1.xds))
	lb.SetRoundRobin(true)
	roots := h0.servingRoots(t)
	cert := h0.workloadCert(t, "default", "cluster.local", "demo", "watcher")
	dials := make([]func() *grpc.ClientConn, 12)
	for i := range dials {
		dials[i] = func() *grpc.ClientConn { return dialTLS(t, lb.addr(), roots, &cert) }
	}
	watchers := startWatchers(t, dials...)
	for _, w := range watchers {
		testwait.For(t, 60*time.Second, func() error { return w.holds(host) })
	}
	if n := scrape(t, h0.url("/metrics"), "nave_xds_connections"); n != 12 {
		t.Fatalf("hub-0 holds %g proxies, want all 12", n)
	}

	h1.start()
	start := time.Now()
	testwait.For(t, 60*time.Second, func() error {
		n0, n1 := scrape(t, h0.url("/metrics"), "nave_xds_connections"), scrape(t, h1.url("/metrics"), "nave_xds_connections")
		if n1 < 4 || n0+n1 != 12 {
			return fmt.Errorf("hub-0 holds %g proxies, hub-1 %g", n0, n1)
		}
		return nil
	})
	t.Logf("spread reached in %s: %g shed by hub-0", time.Since(start).Round(time.Millisecond), scrape(t, h0.url("/metrics"), "nave_hub_replica_shed_connections_total"))
	for _, w := range watchers {
		testwait.For(t, 30*time.Second, func() error { return w.holds(host) })
	}
	checkNoRemovals(t, watchers, func(i int) string { return fmt.Sprintf("client %d", i) }, addService(t, sp.dir))
}

// TestReplicaSendsProxiesHome: six delta ADS clients whose node names
// hub-1 their home (xdsbootstrap.MetaHomeReplica, as an agent with
// xds.replicas writes it; decision 051) and two that name none dial
// through a forwarder that, like Envoy's priorities, takes the first
// replica that accepts, hub-1 then hub-0. While hub-1 is down all land on
// hub-0; once hub-1 is back and ready, hub-0 sheds the six homed clients,
// which reconnect to hub-1, keeps the two without a home (the spread of
// 2 and 6 is within the tolerance), hub-1 sheds none of those at home,
// and no client receives a removal.
func TestReplicaSendsProxiesHome(t *testing.T) {
	rs := newReplicaSet(t, 2, "--replicas.shed-rate", "4")
	h0, h1 := rs.hubs[0], rs.hubs[1]
	const host = "svc-a.demo.svc.cluster.local"
	sp := startEnrolledSpoke(t, h0, "spoke-c1", "", "c1", serviceEntry("svc-a", host, 17351), h0.token(t, "default", "c1", "1h"), t.TempDir())
	h0.waitOwned(t, "default/c1", "hub-0")
	h1.proc.Stop(10 * time.Second)

	fwd := startProxy(t, addr(h1.xds), addr(h0.xds))
	roots := h0.servingRoots(t)
	cert := h0.workloadCert(t, "default", "cluster.local", "demo", "watcher")
	dial := func() *grpc.ClientConn { return dialTLS(t, fwd.addr(), roots, &cert) }
	homed := startWatchersWith(t, map[string]string{xdsbootstrap.MetaHomeReplica: "hub-1"}, dial, dial, dial, dial, dial, dial)
	plain := startWatchers(t, dial, dial)
	watchers := append(homed, plain...)
	for _, w := range watchers {
		testwait.For(t, 60*time.Second, func() error { return w.holds(host) })
	}
	if n := scrape(t, h0.url("/metrics"), "nave_xds_connections"); n != 8 {
		t.Fatalf("hub-0 holds %g proxies, want all 8", n)
	}

	h1.start()
	start := time.Now()
	testwait.For(t, 60*time.Second, func() error {
		n0, n1 := scrape(t, h0.url("/metrics"), "nave_xds_connections"), scrape(t, h1.url("/metrics"), "nave_xds_connections")
		if n0 != 2 || n1 != 6 {
			return fmt.Errorf("hub-0 holds %g proxies, hub-1 %g; want 2 and the 6 homed there", n0, n1)
		}
		return nil
	})
	t.Logf("the homed proxies were home %s after hub-1 was ready", time.Since(start).Round(time.Millisecond))
	for _, w := range watchers {
		testwait.For(t, 30*time.Second, func() error { return w.holds(host) })
	}
	checkNoRemovals(t, watchers, func(i int) string { return fmt.Sprintf("client %d", i) }, addService(t, sp.dir))
	if n := scrape(t, h0.url("/metrics"), "nave_hub_replica_shed_connections_total"); n != 6 {
		t.Errorf("hub-0 shed %g connections, want the 6 homed on hub-1 only", n)
	}
	if n := scrape(t, h1.url("/metrics"), "nave_hub_replica_shed_connections_total"); n != 0 {
		t.Errorf("hub-1 shed %g connections of proxies at home", n)
	}
	for i, w := range plain {
		w.mu.Lock()
		if w.streams != 1 {
			t.Errorf("the client without a home %d opened %d streams, want 1 (never shed)", i, w.streams)
		}
		w.mu.Unlock()
	}
}

// TestRestartedReplicaGetsStaleClusters: a cluster whose spoke has gone
// and whose owner was then SIGKILLed is held, stale, by the survivors;
// the owner, restarted at once, is ready only once it holds that cluster
// again (from the survivors' relay), well before replicas.readyTimeout,
// and serves its services to a new client.
func TestRestartedReplicaGetsStaleClusters(t *testing.T) {
	const host = "svc-a.demo.svc.cluster.local"
	rs := newReplicaSet(t, 3, "--replicas.ready-timeout", "10m")
	h0, h1 := rs.hubs[0], rs.hubs[1]
	s := startEnrolledSpoke(t, h0, "spoke-c1", "", "c1", serviceEntry("svc-a", host, 17401), h0.token(t, "default", "c1", "1h"), t.TempDir())
	h0.waitOwned(t, "default/c1", "hub-0")
	s.proc.Stop(5 * time.Second)
	for _, h := range rs.hubs {
		testwait.For(t, 30*time.Second, func() error {
			if c := h.spokesView(t)["default/c1"]; c.Connected || !c.Stale || !c.Synced {
				return fmt.Errorf("c1 at %s: %+v, want stale", h.url(""), c)
			}
			return nil
		})
	}
	h0.proc.Kill()
	<-h0.proc.Done()
	start := time.Now()
	h0.start() // waits for /healthz/ready (20 s), far below the ready timeout
	t.Logf("hub-0 restarted and ready in %s", time.Since(start).Round(time.Millisecond))
	c := h0.spokesView(t)["default/c1"]
	if !c.Relayed || c.Connected || c.Owner != "hub-0" {
		t.Errorf("restarted hub-0 holds c1 as %+v, want relayed, stale, of its old epoch", c)
	}
	if got := h1.spokesView(t)["default/c1"]; got.Epoch != c.Epoch {
		t.Errorf("epochs differ: hub-1 %s, hub-0 %s", got.Epoch, c.Epoch)
	}
	roots := h0.servingRoots(t)
	cert := h0.workloadCert(t, "default", "cluster.local", "demo", "watcher")
	w := startWatchers(t, func() *grpc.ClientConn { return dialTLS(t, addr(h0.xds), roots, &cert) })[0]
	testwait.For(t, 30*time.Second, func() error { return w.holds(host) })
}

// TestReplicaFailoverKeepsProxylessTraffic: a grpc-go proxyless client
// (nave-demo-client) attached to hub-2 calls a backend whose cluster's
// spoke is owned by hub-0; SIGKILL of hub-0 and the spoke's re-home to
// hub-1 cost the client no failed call (plaintext replicas).
func TestReplicaFailoverKeepsProxylessTraffic(t *testing.T) {
	const host = "echo.demo.svc.cluster.local"
	rs := newReplicaSetOn(t, make([]placement, 3), true)
	h0, h1, h2 := rs.hubs[0], rs.hubs[1], rs.hubs[2]
	be := startBackend(t, "echo-1")
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "echo.yaml"), serviceEntry("echo", host, be.port))
	p := startProxy(t, addr(h0.spokes), addr(h1.spokes), addr(h2.spokes))
	via := *h0
	via.spokes = p.port()
	newSpoke(t, &via, "c1", dir)
	h0.waitOwned(t, "default/c1", "hub-0")

	c := startClient(t, h2, "xds:///"+host+":7070", "failover.demo")
	firstOK(t, c, 60*time.Second)
	killed := time.Now()
	h0.proc.Kill()
	<-h0.proc.Done()
	h1.waitOwned(t, "default/c1", "hub-1")
	after := c.collect(t, killed, 400, 60*time.Second) // 2 s of calls at 5 ms
	if got := tally(after); got["echo-1"] != len(after) {
		t.Errorf("calls after SIGKILL of the spoke's owner: %s, want every one OK to echo-1", describe(got))
	}
}

// TestReplicaFailoverWithKubernetesSpoke is the failover of
// TestReplicaFailoverDeletesNothing with a spoke watching a real
// kube-apiserver: the owner of its stream is SIGKILLed, the spoke re-homes,
// the clients of the surviving replicas receive no removal, and a
// ServiceEntry and an EndpointSlice created in the cluster after the
// failover reach every surviving replica.
func TestReplicaFailoverWithKubernetesSpoke(t *testing.T) {
	const hostK, hostK2 = "svc-k.demo.svc.cluster.local", "svc-k2.demo.svc.cluster.local"
	c := kubeCluster(t)
	// The namespace with a Service and one pod's EndpointSlice (a
	// documentation address: the hub only records it, nothing dials it).
	c.Apply(t, []byte(node("node-a", "us-east", "zone-a")), []byte(echoService),
		[]byte(podWithSlice("echo-v1", "v1", "node-a", "192.0.2.11", 17091, true, false)))
	c.Apply(t, []byte(serviceEntry("svc-k", hostK, 17083)))
	rs := newReplicaSet(t, 3)
	h0, h1, h2 := rs.hubs[0], rs.hubs[1], rs.hubs[2]
	for _, h := range rs.hubs {
		h.waitMembers(t, map[*hub]string{h0: "hub-0,hub-1,hub-2", h1: "hub-1,hub-0,hub-2", h2: "hub-2,hub-0,hub-1"}[h])
	}
	p := startProxy(t, addr(h0.spokes), addr(h1.spokes), addr(h2.spokes))
	via := *h0
	via.spokes = p.port()
	startSecureKubeSpoke(t, &via, "k1", h0.token(t, "default", "k1", "1h"), "", c)
	h0.waitOwned(t, "default/k1", "hub-0")

	roots := h0.servingRoots(t)
	cert := h0.workloadCert(t, "default", "cluster.local", "demo", "watcher")
	survivors := []*hub{h1, h2}
	var dials []func() *grpc.ClientConn
	for _, h := range survivors {
		dials = append(dials, func() *grpc.ClientConn { return dialTLS(t, addr(h.xds), roots, &cert) })
	}
	watchers := startWatchers(t, dials...)
	for i, w := range watchers {
		testwait.For(t, 60*time.Second, func() error {
			if err := w.holds(hostK); err != nil {
				return fmt.Errorf("client of hub-%d: %v", i+1, err)
			}
			return nil
		})
	}
	for _, h := range survivors {
		waitEndpoints(t, h, echoHost, "k1/v1/17091/healthy/us-east/zone-a")
	}

	killed := time.Now()
	h0.proc.Kill()
	<-h0.proc.Done()
	owner := ""
	testwait.For(t, 30*time.Second, func() error {
		for _, h := range survivors {
			if st, ok := h.spokesView(t)["default/k1"]; ok && st.Connected && st.Synced && !st.Relayed {
				owner = st.Owner
				return nil
			}
		}
		return errors.New("no surviving replica owns default/k1 yet")
	})
	t.Logf("re-home: the Kubernetes spoke k1 owned by %s %s after SIGKILL of hub-0", owner, time.Since(killed).Round(time.Millisecond))

	// A change made in the cluster after the failover reaches every survivor.
	c.Apply(t, []byte(serviceEntry("svc-k2", hostK2, 17084)),
		[]byte(podWithSlice("echo-v2", "v2", "node-a", "192.0.2.12", 17092, true, false)))
	for _, h := range survivors {
		waitEndpoints(t, h, echoHost, "k1/v1/17091/healthy/us-east/zone-a", "k1/v2/17092/healthy/us-east/zone-a")
	}
	for i, w := range watchers {
		testwait.For(t, 30*time.Second, func() error {
			if err := w.holds(hostK, hostK2); err != nil {
				return fmt.Errorf("client of hub-%d: %v", i+1, err)
			}
			return nil
		})
	}
	checkNoRemovals(t, watchers, func(i int) string { return fmt.Sprintf("the client of hub-%d", i+1) }, func(name, host string) {
		c.Apply(t, []byte(serviceEntry(name, host, 17999)))
	})
}
