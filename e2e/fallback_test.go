package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/shared/xdsbootstrap"
)

// startFallbackClient runs nave-demo-client with a bootstrap listing the
// hub first and the spoke's fallback server second.
func startFallbackClient(t *testing.T, h *hub, s *fallbackSpoke, nodeID string) *client {
	t.Helper()
	b := xdsbootstrap.New(addr(h.xds), nodeID, map[string]any{"NAMESPACE": "demo"}, nil).WithFallbackServer(addr(s.xds), nil)
	doc, err := b.JSON()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "bootstrap.json")
	if err := os.WriteFile(path, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	return &client{proc: harness.Start(t, "client-"+nodeID, binary("nave-demo-client"), "--target", "xds:///"+echoHost+":7070",
		"--bootstrap", path, "--interval", "5ms", "--timeout", "2s", "--json")}
}

// since is the calls made after t.
func since(calls []call, t time.Time) []call {
	return slices.DeleteFunc(calls, func(c call) bool { return !c.Time.After(t) })
}

// onlyOn checks that the last n calls of c, all made after since, went to
// one of backends.
func onlyOn(c *client, since time.Time, n int, backends ...string) error {
	calls := c.calls()
	if len(calls) < n {
		return fmt.Errorf("%d calls, want %d", len(calls), n)
	}
	for _, call := range calls[len(calls)-n:] {
		if call.Time.Before(since) {
			return fmt.Errorf("too few calls since %s", since.Format(time.StampMilli))
		}
		if !slices.Contains(backends, call.Backend) {
			return fmt.Errorf("a call went to %q (%s), want only %v", call.Backend, call.Code, backends)
		}
	}
	return nil
}

// TestFallback: a hub, two spokes (clusters a and b), a proxyless client in
// a calling a service with endpoints in both. The hub is killed: calls go
// on to both clusters; a client started during the outage gets its config
// from spoke a (grpc-go's xDS fallback to the second server of its
// bootstrap); a route change made at spoke a takes effect for it. The hub
// comes back: it has the change, clients return to it, spoke a hands back.
func TestFallback(t *testing.T) {
	av1, bv2, av3, av1b := startBackend(t, "a-v1"), startBackend(t, "b-v2"), startBackend(t, "a-v3"), startBackend(t, "a-v1b")
	dirA, dirB := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(dirA, "echo.yaml"), echoIn(map[string]*backend{"v1": av1, "v3": av3}))
	routePath := filepath.Join(dirA, "route.yaml")
	writeFile(t, routePath, fallbackRoute(map[string]int{"v1": 50, "v2": 50}))
	writeFile(t, filepath.Join(dirB, "echo.yaml"), echoIn(map[string]*backend{"v2": bv2}))

	h := newHub(t)
	spA := newFallbackSpoke(t, h, "a", dirA)
	spB := newFallbackSpoke(t, h, "b", dirB)
	testwait.For(t, 20*time.Second, func() error {
		if st := spA.status(t); !st.Remote.Complete || st.Remote.Clusters["b"] != 2 {
			return fmt.Errorf("spoke a's remote view: %+v", st.Remote)
		}
		return nil
	})
	watcher := startRemovalWatcher(t, "watcher.demo", addr(h.xds), addr(spA.xds))
	testwait.For(t, 20*time.Second, func() error {
		if _, held, _ := watcher.snapshot(); held == 0 {
			return fmt.Errorf("the watcher holds nothing yet")
		}
		return nil
	})
	old := startFallbackClient(t, h, spA, "old.demo")
	first := firstOK(t, old, 30*time.Second)
	if got := tally(old.collect(t, first, 200, 30*time.Second)); got["a-v1"] == 0 || got["b-v2"] == 0 {
		t.Fatalf("before the outage: %s, want both clusters", describe(got))
	}
	// A client in cluster b: the hub first, spoke b second.
	inB := startFallbackClient(t, h, spB, "b-client.demo")
	firstB := firstOK(t, inB, 30*time.Second)
	if got := tally(inB.collect(t, firstB, 200, 30*time.Second)); got["a-v1"] == 0 || got["b-v2"] == 0 {
		t.Fatalf("b's client before the outage: %s, want both clusters", describe(got))
	}
	if st := spA.status(t); st.Active || st.Proxies != 0 {
		t.Fatalf("spoke a serves while the hub is up: %+v", st)
	}

	// The outage.
	h.proc.Kill()
	down := time.Now()
	var activeAt time.Time
	testwait.For(t, 20*time.Second, func() error {
		st := spA.status(t)
		if !st.Active {
			return fmt.Errorf("spoke a not in fallback yet")
		}
		activeAt = st.Since
		return nil
	})
	t.Logf("hub killed -> spoke a serving xDS: %s (fallback.after 1s)", activeAt.Sub(down).Round(time.Millisecond))
	if got := tally(old.collect(t, down, 300, 30*time.Second)); got["a-v1"] == 0 || got["b-v2"] == 0 || got["a-v1"]+got["b-v2"] != 300 {
		t.Fatalf("old client during the outage: %s, want both clusters and no failure", describe(got))
	}

	started := time.Now()
	fresh := startFallbackClient(t, h, spA, "fresh.demo")
	firstFresh := firstOK(t, fresh, 30*time.Second)
	t.Logf("client started during the outage -> first OK call (via spoke a): %s", firstFresh.Sub(started).Round(time.Millisecond))
	if got := tally(fresh.collect(t, firstFresh, 200, 30*time.Second)); got["a-v1"] == 0 || got["b-v2"] == 0 {
		t.Fatalf("fresh client during the outage: %s, want both clusters (b's endpoints from spoke a's remote view)", describe(got))
	}
	if st := spA.status(t); st.Proxies < 1 {
		t.Fatalf("spoke a serves no proxy: %+v", st)
	}

	// A route change at spoke a during the outage applies to the client it serves.
	edited := time.Now()
	// (To a subset the client already routes to: a route to a cluster it
	// never used can fail one call in grpc-go while its balancer catches
	// up — "unknown cluster selected for RPC" — see docs/fallback.md.)
	writeFile(t, routePath, fallbackRoute(map[string]int{"v1": 100}))
	var movedAt time.Time
	testwait.For(t, 20*time.Second, func() error {
		calls := fresh.calls()
		for i := len(calls) - 1; i >= 0 && i >= len(calls)-50; i-- {
			if calls[i].Backend != "a-v1" {
				return fmt.Errorf("fresh client still calls %s", calls[i].Backend)
			}
		}
		movedAt = time.Now()
		return nil
	})
	t.Logf("route edit at spoke a during the outage -> fresh client on a-v1 only: %s", movedAt.Sub(edited).Round(time.Millisecond))
	oldDuring := tally(old.collect(t, edited, 200, 30*time.Second))
	t.Logf("old client (everything cached, hub first) after the edit, still on its cached config: %s", describe(oldDuring))

	// A new endpoint in cluster a during the outage (subset v1): the
	// client spoke a serves calls it.
	added := time.Now()
	writeFile(t, filepath.Join(dirA, "more.yaml"), echoEndpoint(av1b, "v1"))
	var addedAt time.Time
	testwait.For(t, 20*time.Second, func() error {
		if got := tally(fresh.calls()); got["a-v1b"] == 0 {
			return fmt.Errorf("fresh client: %s, no call to the new endpoint a-v1b yet", describe(got))
		}
		addedAt = time.Now()
		return nil
	})
	t.Logf("new endpoint in cluster a during the outage -> fresh client calls it: %s", addedAt.Sub(added).Round(time.Millisecond))
	if got := tally(fresh.collect(t, addedAt, 200, 30*time.Second)); got["a-v1"]+got["a-v1b"] != 200 || got["a-v1b"] == 0 {
		t.Fatalf("fresh client after the new endpoint: %s, want subset v1 only, a-v1b included", describe(got))
	}

	// Spoke a restarts during the outage: it serves again from the view it
	// saved, and a new client gets both clusters from it.
	spA.proc.Stop(10 * time.Second)
	restarted := time.Now()
	spA.start(t, h, "a")
	testwait.For(t, 20*time.Second, func() error {
		if st := spA.status(t); !st.Active || !st.Remote.Complete || st.Remote.Clusters["b"] != 2 {
			return fmt.Errorf("restarted spoke a: %+v", st)
		}
		return nil
	})
	t.Logf("spoke a restarted during the outage -> serving from its saved view: %s", time.Since(restarted).Round(time.Millisecond))
	late := startFallbackClient(t, h, spA, "late.demo")
	if got := tally(late.collect(t, firstOK(t, late, 30*time.Second), 200, 30*time.Second)); got["a-v1"]+got["a-v1b"] != 200 || got["a-v1b"] == 0 {
		t.Fatalf("client started after spoke a's restart: %s, want all on subset v1, a-v1b included (route and endpoint changed during the outage)", describe(got))
	}
	late.proc.Stop(10 * time.Second)

	// The hub comes and goes three times: spoke a sees it synced each time,
	// then loses it before fallback.handBackAfter (3 s of continuous
	// health), and keeps serving: no flapping.
	flapStart := time.Now()
	for range 3 {
		h.start()
		testwait.For(t, 30*time.Second, func() error {
			if !spA.status(t).HubSynced {
				return errors.New("spoke a has not seen the hub synced")
			}
			return nil
		})
		h.proc.Kill()
		<-h.proc.Done()
		testwait.For(t, 30*time.Second, func() error {
			if spA.status(t).HubSynced {
				return errors.New("spoke a still sees the killed hub synced")
			}
			return nil
		})
	}
	if st := spA.status(t); !st.Active || st.Transitions != 1 {
		t.Fatalf("spoke a flapped while the hub came and went: %+v", st)
	}
	t.Logf("hub started and killed three times in %s: spoke a stayed in fallback", time.Since(flapStart).Round(time.Millisecond))

	// The hub comes back: the spokes resync, the change is at the hub, the
	// clients return to it and spoke a hands back after handBackAfter.
	h.start()
	back := time.Now()
	testwait.For(t, 30*time.Second, func() error { return onlyOn(old, back, 50, "a-v1", "a-v1b") })
	t.Logf("hub back -> old client follows the change made during the outage (from the hub): %s", time.Since(back).Round(time.Millisecond))
	// The outage's changes reach cluster b's clients through the hub: the
	// route (subset v1 only) and the new endpoint.
	testwait.For(t, 30*time.Second, func() error {
		if err := onlyOn(inB, back, 50, "a-v1", "a-v1b"); err != nil {
			return err
		}
		if got := tally(since(inB.calls(), back)); got["a-v1b"] == 0 {
			return fmt.Errorf("b's client: %s since the hub came back, none to a-v1b", describe(got))
		}
		return nil
	})
	t.Logf("hub back -> b's client follows the route change and calls the new endpoint made at spoke a during the outage: %s", time.Since(back).Round(time.Millisecond))
	testwait.For(t, 30*time.Second, func() error {
		var s syncz
		if err := harness.GetJSON(h.url("/debug/syncz"), &s); err != nil {
			return err
		}
		for _, c := range s {
			if c.NodeID == "fresh.demo" {
				return nil
			}
		}
		return fmt.Errorf("fresh.demo not connected to the hub")
	})
	t.Logf("hub back -> fresh client connected to the hub: %s", time.Since(back).Round(time.Millisecond))
	testwait.For(t, 30*time.Second, func() error {
		if st := spA.status(t); st.Active || st.Transitions != 2 || st.Proxies != 0 {
			return fmt.Errorf("spoke a: %+v", st)
		}
		return nil
	})
	t.Logf("hub back -> spoke a handed back: %s (fallback.handBackAfter 3s)", time.Since(back).Round(time.Millisecond))

	assertMetricsDocumented(t, h.url("/metrics"), spA.url("/metrics"))
	removals, held, servers := watcher.snapshot()
	t.Logf("watching delta ADS client: holds %d resources, responses per server %v, removals %d", held, servers, len(removals))
	if len(removals) > 0 {
		t.Errorf("the watching client saw removals no spoke made: %v", removals)
	}
	if servers[addr(spA.xds)] == 0 {
		t.Errorf("the watching client was never served by spoke a: %v", servers)
	}
	for name, c := range map[string]struct {
		c    *client
		from time.Time
	}{"old": {old, first}, "fresh": {fresh, firstFresh}, "b's": {inB, firstB}} {
		if f := failuresSince(c.c.calls(), c.from); len(f) > 0 {
			t.Errorf("%s client: %d failed calls since its first successful one, first %+v", name, len(f), f[0])
		}
	}
}
