package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/hub/replica"
)

// TestReplicasBalanceSpokes runs three hub replicas (each gossiping its
// replicas.spokeAddress) and four enrolled file spokes that are given only
// hub-0's address, so all four land there. hub-0 moves spokes, one at a
// time, to the least-loaded replica it names in the stream's trailer,
// until each replica owns at least one (2, 1, 1), and then moves no more.
// A delta ADS client on every replica, attached before the first spoke,
// receives no removal through the moves, and a config change of a spoke
// that moved arrives at every client.
func TestReplicasBalanceSpokes(t *testing.T) {
	rs := planReplicaSet(t, make([]placement, 3), false, "--replicas.spoke-shed-rate", "2", "--replicas.spoke-min-age", "1s")
	for _, h := range rs.hubs {
		h.extraArgs = append(h.extraArgs, "--replicas.spoke-address", h.at(h.spokes))
		h.start()
	}
	h0 := rs.hubs[0]
	for _, h := range rs.hubs {
		harness.Eventually(t, 30*time.Second, func() error {
			v := h.replicas(t)
			ready := 0
			for _, m := range v.Members {
				if m.Ready {
					ready++
				}
			}
			if ready != 3 {
				return fmt.Errorf("%s sees %d ready members of %s", v.Self, ready, v.ids())
			}
			return nil
		})
	}

	roots := h0.servingRoots(t)
	cert := h0.workloadCert(t, "default", "cluster.local", "demo", "watcher")
	var dials []func() *grpc.ClientConn
	for _, h := range rs.hubs {
		dials = append(dials, func() *grpc.ClientConn { return dialTLS(t, h.at(h.xds), roots, &cert) })
	}
	watchers := startWatchers(t, dials...)

	clusters := []string{"c1", "c2", "c3", "c4"}
	hosts := map[string][]string{}
	config := func(c string) string {
		var docs []string
		for i, n := range hosts[c] {
			docs = append(docs, serviceEntry(n, n+".demo.svc.cluster.local", 17400+i))
		}
		return strings.Join(docs, "---\n")
	}
	all := func() []string {
		var out []string
		for _, c := range clusters {
			for _, n := range hosts[c] {
				out = append(out, n+".demo.svc.cluster.local")
			}
		}
		return out
	}
	spokes := map[string]*secureSpoke{}
	start := time.Now()
	for _, c := range clusters {
		hosts[c] = []string{"svc-" + c}
		spokes[c] = startEnrolledSpoke(t, h0, "spoke-"+c, "", c, config(c), h0.token(t, "default", c, "1h"), t.TempDir())
	}

	// owners is who owns each cluster, as every replica agrees.
	owners := func() (map[string]string, error) {
		out := map[string]string{}
		for _, h := range rs.hubs {
			self := h.replicas(t).Self
			for id, c := range h.spokesView(t) {
				if !c.Connected || !c.Synced {
					return nil, fmt.Errorf("%s holds %s not connected and synced", self, id)
				}
				if o, ok := out[id]; ok && o != c.Owner {
					return nil, fmt.Errorf("%s says %s owns %s, another replica %s", self, c.Owner, id, o)
				}
				out[id] = c.Owner
			}
		}
		if len(out) != len(clusters) {
			return nil, fmt.Errorf("%d clusters held, want %d", len(out), len(clusters))
		}
		return out, nil
	}
	var spread map[string]int
	harness.Eventually(t, 60*time.Second, func() error {
		own, err := owners()
		if err != nil {
			return err
		}
		spread = map[string]int{}
		for _, o := range own {
			spread[o]++
		}
		for _, id := range []string{"hub-0", "hub-1", "hub-2"} {
			if spread[id] < 1 {
				return fmt.Errorf("spokes per replica %v: %s owns none", spread, id)
			}
		}
		return nil
	})
	t.Logf("spread %v reached %s after the spokes started (spoke-shed-rate 2/s, spoke-min-age 1s)", spread, time.Since(start).Round(time.Millisecond))
	for i, w := range watchers {
		harness.Eventually(t, 60*time.Second, func() error {
			if err := w.holds(all()...); err != nil {
				return fmt.Errorf("client of hub-%d: %v", i, err)
			}
			return nil
		})
	}

	// Hysteresis: at 2, 1, 1 nothing moves any more.
	shed := func() float64 {
		var n float64
		for _, h := range rs.hubs {
			n += scrape(t, h.url("/metrics"), "nave_hub_replica_shed_spokes_total")
		}
		return n
	}
	before := shed()
	if before < 2 {
		t.Errorf("%g spokes moved in all, want at least 2", before)
	}
	time.Sleep(3 * time.Second) // three times the min age; six shed intervals
	if after := shed(); after != before {
		t.Errorf("spokes kept moving at an even spread: %g moves, then %g", before, after)
	}
	own, err := owners()
	if err != nil {
		t.Fatal(err)
	}

	// A config change of a spoke that moved arrives everywhere.
	var moved string
	for _, c := range clusters {
		if own["default/"+c] != "hub-0" {
			moved = c
			break
		}
	}
	var up struct {
		Target string `json:"target"`
		Moves  int    `json:"moves"`
	}
	if err := harness.GetJSON(spokes[moved].url("/debug/uplink"), &up); err != nil {
		t.Fatal(err)
	}
	if up.Moves < 1 || up.Target == addr(h0.spokes) {
		t.Errorf("spoke %s owned by %s: its uplink says target %s, %d moves", moved, own["default/"+moved], up.Target, up.Moves)
	}
	hosts[moved] = append(hosts[moved], "svc-"+moved+"-new")
	writeFile(t, filepath.Join(spokes[moved].dir, "config.yaml"), config(moved))
	for i, w := range watchers {
		harness.Eventually(t, 60*time.Second, func() error {
			if err := w.holds(all()...); err != nil {
				return fmt.Errorf("client of hub-%d: %v", i, err)
			}
			return nil
		})
	}
	checkNoRemovals(t, watchers, func(i int) string { return fmt.Sprintf("the client of hub-%d", i) })

	var v struct {
		Spokes replica.SpokeBalance `json:"spokes"`
	}
	if err := harness.GetJSON(h0.url("/debug/replicas"), &v); err != nil {
		t.Fatal(err)
	}
	if v.Spokes.Moved < 1 || v.Spokes.Last == nil || len(v.Spokes.Spokes) != 3 {
		t.Errorf("hub-0's /debug/replicas spokes: %+v, want its moves and the spokes of 3 replicas", v.Spokes)
	}
	if n := scrape(t, h0.url("/metrics"), "nave_hub_replica_spokes"); int(n) != spread["hub-0"] {
		t.Errorf("hub-0 nave_hub_replica_spokes = %g, want %d", n, spread["hub-0"])
	}
	assertMetricsDocumented(t, h0.url("/metrics"))
}
