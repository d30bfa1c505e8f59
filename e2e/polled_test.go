package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/hub/servingcert"
	"github.com/navemesh/nave/internal/testwait"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	spokeenroll "github.com/navemesh/nave/spoke/enroll"
)

// startPolledSpoke starts a spoke of the default mesh in polled mode,
// listening for the hub at port: it enrolls with a join token (a one-off
// call to the hub), then dials nothing for its state.
func startPolledSpoke(t *testing.T, h *hub, cluster string, port int, extra ...string) *secureSpoke {
	t.Helper()
	return startEnrolledSpoke(t, h, "spoke-"+cluster, "", cluster, secureConfig, h.token(t, "default", cluster, "1h"), t.TempDir(),
		append([]string{"--hub.mode", "polled", "--hub.poll-listen", addr(port)}, extra...)...)
}

// pollAs dials a polled spoke at target as a hub presenting cert and
// returns how its Poll stream ended before the spoke said anything.
func pollAs(t *testing.T, target string, cert *tls.Certificate) error {
	t.Helper()
	c := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} //nolint:gosec // the test checks the spoke refuses the client, not the server
	if cert != nil {
		c.Certificates = []tls.Certificate{*cert}
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(credentials.NewTLS(c)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := protocolv1.NewPolledClient(conn).Poll(ctx)
	if err != nil {
		return err
	}
	if _, err := stream.Recv(); err != nil {
		return err
	}
	return fmt.Errorf("the spoke sent its state")
}

// TestPolledModeSecurity: with TLS, a polled spoke serves its state only
// to the hub (its serving CA's own certificate), and the hub takes a
// polled stream only from the cluster configured at that address,
// enrolled and not revoked — the checks Push applies.
func TestPolledModeSecurity(t *testing.T) {
	portA, portB := harness.FreePort(t), harness.FreePort(t)
	// Cluster a is listed at b's address: whoever answers there must be b.
	// b never syncs: the startup grace, which holds the mesh back from
	// Watch until every enrolled cluster synced, is short.
	h := newSecureHub(t, "--spokes.poll", "default/a="+addr(portA)+",default/mislabelled="+addr(portB),
		"--spokes.poll-backoff-initial", "100ms", "--spokes.poll-backoff-max", "1s", "--ingest.startup-grace", "2s")
	// a keeps the rest of the mesh (fallback on): the hub opens PollWatch
	// beside Poll; c pushes, so there is another cluster to see.
	a := startPolledSpoke(t, h, "a", portA, "--fallback.enabled", "--fallback.listen", addr(harness.FreePort(t)))
	b := startPolledSpoke(t, h, "b", portB)
	c := startSecureSpoke(t, h, "spoke-c", "", "c", h.token(t, "default", "c", "1h"))

	t.Run("the hub dials the spoke over mTLS", func(t *testing.T) {
		st := h.waitSynced(t, "default/a")
		if st.Peer != addr(portA) || st.Resources["ServiceEntry"] != 1 || !st.Polled {
			t.Errorf("default/a at the hub: %+v, want it polled from %s with its ServiceEntry", st, addr(portA))
		}
		var up struct{ Mode, PolledBy, State string }
		testwait.For(t, 10*time.Second, func() error {
			if err := harness.GetJSON(a.url("/debug/uplink"), &up); err != nil {
				return err
			}
			if up.Mode != "polled" || up.State != "synced" || !strings.HasPrefix(up.PolledBy, "spiffe://hub.nave.internal/ns/nave-system/sa/nave-hub at ") {
				return fmt.Errorf("spoke a's uplink: %+v", up)
			}
			return nil
		})
		t.Logf("spoke a is polled by %s", up.PolledBy)
	})

	t.Run("the polled spoke keeps the rest of its mesh (PollWatch)", func(t *testing.T) {
		harness.WaitReady(t, c.url("/healthz/ready"), 30*time.Second)
		h.waitSynced(t, "default/c")
		testwait.For(t, 30*time.Second, func() error {
			var view struct {
				Complete bool
				Trust    bool `json:"trustBundle"`
				Clusters map[string]int
			}
			if err := harness.GetJSON(a.url("/debug/remote"), &view); err != nil {
				return err
			}
			if !view.Complete || !view.Trust || view.Clusters["c"] != 1 {
				return fmt.Errorf("spoke a's remote view: %+v, want complete with c's ServiceEntry and the trust bundle", view)
			}
			if _, own := view.Clusters["a"]; own {
				return fmt.Errorf("spoke a's remote view holds its own cluster: %+v", view)
			}
			return nil
		})
		// The spoke marks its watch synced just after saving the view.
		testwait.For(t, 10*time.Second, func() error {
			var up struct{ Watch string }
			if err := harness.GetJSON(a.url("/debug/uplink"), &up); err != nil || up.Watch != "synced" {
				return fmt.Errorf("spoke a's watch: %+v %v, want synced", up, err)
			}
			var watches []struct{ Mesh, Cluster string }
			if err := harness.GetJSON(h.url("/debug/watch"), &watches); err != nil {
				return err
			}
			for _, w := range watches {
				if w.Cluster == "a" {
					return nil
				}
			}
			return fmt.Errorf("the hub's /debug/watch does not list a: %+v", watches)
		})
	})

	t.Run("a spoke answering for another cluster is refused", func(t *testing.T) {
		testwait.For(t, 20*time.Second, func() error {
			var targets []struct {
				Cluster, State, LastError string
				Failures, Streams         int
			}
			if err := harness.GetJSON(h.url("/debug/polled"), &targets); err != nil {
				return err
			}
			for _, tg := range targets {
				if tg.Cluster == "mislabelled" && tg.Failures >= 2 && tg.Streams == 0 &&
					strings.Contains(tg.LastError, "is cluster default/b, but this address is configured for default/mislabelled") {
					return nil
				}
			}
			return fmt.Errorf("/debug/polled: %+v", targets)
		})
		// b is enrolled, so the hub lists it, as missing: it holds nothing of it.
		if st, held := h.spokesView(t)["default/b"]; held && (st.Missing == nil || st.Connected || len(st.Resources) > 0) {
			t.Errorf("the hub holds default/b, which it never meant to poll: %+v", st)
		}
		if st, held := h.spokesView(t)["default/mislabelled"]; held {
			t.Errorf("the hub holds default/mislabelled from b's stream: %+v", st)
		}
		if n := scrape(t, h.url("/metrics"), "nave_hub_poll_dial_failures_total"); n < 2 {
			t.Errorf("nave_hub_poll_dial_failures_total = %g, want at least 2", n)
		}
		var up struct{ State string }
		if err := harness.GetJSON(b.url("/debug/uplink"), &up); err != nil || up.State == "synced" {
			t.Errorf("spoke b's uplink: %+v %v; nobody should have taken its state", up, err)
		}
	})

	t.Run("a caller without the hub's certificate is refused by the spoke", func(t *testing.T) {
		before := scrape(t, a.url("/metrics"), "nave_spoke_poll_refused_total")
		creds, err := spokeenroll.Load(b.state)
		if err != nil {
			t.Fatal(err)
		}
		// The mesh's CA, a workload claiming the hub's name, a look-alike
		// CA, the hub's serving CA with another identity (a replica's),
		// and no certificate at all.
		spokeCert := creds.Certificate
		workload := h.workloadCert(t, "default", "cluster.local", "nave-system", "nave-hub")
		rogue := selfSignedClient(t, "spiffe://hub.nave.internal/ns/nave-system/sa/nave-hub")
		replica := replicaCert(t, h)
		for _, tc := range []struct {
			what string
			cert *tls.Certificate
		}{
			{"another spoke's cluster certificate", &spokeCert},
			{"a workload certificate of the mesh", &workload},
			{"a look-alike CA's certificate naming the hub", &rogue},
			{"a hub replica's certificate", replica},
			{"no certificate", nil},
		} {
			if err := pollAs(t, addr(portA), tc.cert); err == nil || strings.Contains(err.Error(), "sent its state") {
				t.Errorf("%s: the spoke answered (%v)", tc.what, err)
			} else {
				t.Logf("%s: %v", tc.what, err)
			}
		}
		// crypto/tls refuses the caller without a certificate itself.
		if after := scrape(t, a.url("/metrics"), "nave_spoke_poll_refused_total"); after-before < 4 {
			t.Errorf("nave_spoke_poll_refused_total went from %g to %g, want 4 more", before, after)
		}
		if !strings.Contains(a.proc.Log(), "the caller is not the hub") {
			t.Error("the spoke's log does not say why it refused")
		}
		// The hub's own stream was not disturbed.
		if st := h.waitSynced(t, "default/a"); st.Peer != addr(portA) {
			t.Errorf("default/a: %+v", st)
		}
	})

	t.Run("another hub (its own serving CA) polling the spoke is refused", func(t *testing.T) {
		before := scrape(t, a.url("/metrics"), "nave_spoke_poll_refused_total")
		impostor := newSecureHub(t, "--spokes.poll", "default/a="+addr(portA), "--spokes.poll-backoff-initial", "100ms", "--spokes.poll-backoff-max", "500ms")
		testwait.For(t, 20*time.Second, func() error {
			var targets []struct {
				State, LastError  string
				Failures, Streams int
			}
			if err := harness.GetJSON(impostor.url("/debug/polled"), &targets); err != nil {
				return err
			}
			if len(targets) != 1 || targets[0].Failures < 2 || targets[0].Streams != 0 {
				return fmt.Errorf("the other hub's /debug/polled: %+v", targets)
			}
			t.Logf("the other hub: %d failed attempts, last: %s", targets[0].Failures, targets[0].LastError)
			return nil
		})
		if after := scrape(t, a.url("/metrics"), "nave_spoke_poll_refused_total"); after-before < 2 {
			t.Errorf("nave_spoke_poll_refused_total went from %g to %g, want the other hub's attempts counted", before, after)
		}
		if _, held := impostor.spokesView(t)["default/a"]; held {
			t.Error("the other hub holds default/a")
		}
		impostor.proc.Stop(10 * time.Second)
		// The real hub's stream was not disturbed.
		if st := h.waitSynced(t, "default/a"); st.Peer != addr(portA) {
			t.Errorf("default/a: %+v", st)
		}
	})

	t.Run("metrics are documented", func(t *testing.T) {
		assertMetricsDocumented(t, h.url("/metrics"), a.url("/metrics"))
	})

	t.Run("a revoked cluster is cut off and not polled again", func(t *testing.T) {
		mustNavectl(t, "cluster", "revoke", "--state-dir", h.state, "--mesh", "default", "--cluster", "a")
		testwait.For(t, 10*time.Second, func() error {
			if _, ok := h.spokesView(t)["default/a"]; ok {
				return fmt.Errorf("default/a is still held")
			}
			return nil
		})
		type target struct {
			Cluster, State, LastError string
			Failures                  int
		}
		refused := func() (target, error) {
			var targets []target
			if err := harness.GetJSON(h.url("/debug/polled"), &targets); err != nil {
				return target{}, err
			}
			for _, tg := range targets {
				if tg.Cluster == "a" && tg.State != "streaming" && strings.Contains(tg.LastError, "cluster default/a is revoked") {
					return tg, nil
				}
			}
			return target{}, fmt.Errorf("/debug/polled: %+v", targets)
		}
		var first target
		testwait.For(t, 20*time.Second, func() (err error) { first, err = refused(); return err })
		// A few more attempts, each refused.
		testwait.For(t, 20*time.Second, func() error {
			tg, err := refused()
			if err == nil && tg.Failures < first.Failures+3 {
				err = fmt.Errorf("%d failed attempts since the first refusal, want 3", tg.Failures-first.Failures)
			}
			return err
		})
		if _, ok := h.spokesView(t)["default/a"]; ok {
			t.Error("the revoked cluster came back")
		}
	})
}

// replicaCert is a hub replica's certificate from the hub's serving CA:
// the right CA, but not the hub's identity.
func replicaCert(t *testing.T, h *hub) *tls.Certificate {
	t.Helper()
	store, err := servingcert.OpenStore(ca.StoreDir, h.state, "", "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := servingcert.New(context.Background(), store, []string{"127.0.0.1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := c.MintReplica(context.Background(), "hub-x")
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// TestReplicasPollASpokeOnce: three hub replicas list one polled spoke;
// exactly one of them (its owner) dials it and the others hold its state
// through the relay. SIGKILL of the owner: another replica takes the spoke
// over and dials it, and a watching client of a surviving replica sees no
// removal.
func TestReplicasPollASpokeOnce(t *testing.T) {
	const host = "svc-p.demo.svc.cluster.local"
	port := harness.FreePort(t)
	rs := newReplicaSet(t, 3, "--spokes.poll", "default/p1="+addr(port), "--spokes.poll-backoff-initial", "100ms", "--spokes.poll-backoff-max", "1s")
	s := startEnrolledSpoke(t, rs.hubs[0], "spoke-p1", "", "p1", serviceEntry("svc-p", host, 17501), rs.hubs[0].token(t, "default", "p1", "1h"),
		t.TempDir(), "--hub.mode", "polled", "--hub.poll-listen", addr(port))

	// owner waits until exactly one live replica streams with the spoke and
	// every live replica holds it synced (the others through the relay).
	owner := func(live []*hub) int {
		t.Helper()
		found := -1
		testwait.For(t, 60*time.Second, func() error {
			found = -1
			for i, h := range live {
				var targets []struct{ State string }
				if err := harness.GetJSON(h.url("/debug/polled"), &targets); err != nil {
					return err
				}
				if len(targets) != 1 {
					return fmt.Errorf("replica %d lists %d polled spokes", i, len(targets))
				}
				c, ok := h.spokesView(t)["default/p1"]
				switch {
				case !ok || !c.Synced:
					return fmt.Errorf("replica %d does not hold default/p1 synced: %+v", i, c)
				case targets[0].State == "streaming" && found >= 0:
					return fmt.Errorf("replicas %d and %d both stream with the spoke", found, i)
				case targets[0].State == "streaming":
					if c.Relayed || !c.Connected {
						return fmt.Errorf("replica %d streams with the spoke but holds it as %+v", i, c)
					}
					found = i
				case targets[0].State != "not-owner":
					return fmt.Errorf("replica %d: polled spoke %s", i, targets[0].State)
				case !c.Relayed:
					return fmt.Errorf("replica %d does not own the spoke but holds it as %+v", i, c)
				}
			}
			if found < 0 {
				return fmt.Errorf("no replica streams with the spoke")
			}
			return nil
		})
		return found
	}
	first := owner(rs.hubs)
	t.Logf("hub-%d owns the polled spoke", first)
	var survivors []*hub
	for i, h := range rs.hubs {
		if i != first {
			survivors = append(survivors, h)
		}
	}
	roots := survivors[0].servingRoots(t)
	cert := survivors[0].workloadCert(t, "default", "cluster.local", "demo", "watcher")
	ws := startWatchers(t, func() *grpc.ClientConn { return dialTLS(t, addr(survivors[0].xds), roots, &cert) })
	testwait.For(t, 30*time.Second, func() error { return ws[0].holds(host) })

	rs.hubs[first].proc.Kill()
	<-rs.hubs[first].proc.Done()
	killed := time.Now()
	next := owner(survivors)
	t.Logf("the polled spoke was taken over %s after its owner was killed", time.Since(killed).Round(time.Millisecond))
	var up struct {
		PolledBy string
		Sessions int
	}
	if err := harness.GetJSON(s.url("/debug/uplink"), &up); err != nil || up.Sessions < 2 {
		t.Errorf("spoke uplink: %+v %v, want a second session", up, err)
	}
	t.Logf("now polled by %s (replica %s)", up.PolledBy, survivors[next].url(""))
	checkNoRemovals(t, ws, func(int) string { return "the watching client" }, addService(t, s.dir))
}
