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
	"github.com/navemesh/nave/internal/testwait"
)

// balanced is a spoke-balancing scenario: a replica set, file spokes of
// one service each, and a delta ADS client on every replica.
type balanced struct {
	t        *testing.T
	rs       *replicaSet
	clusters []string
	hosts    map[string][]string
	spokes   map[string]*secureSpoke
	watchers []*watcher
}

func newBalanced(t *testing.T, rs *replicaSet, clusters ...string) *balanced {
	b := &balanced{t: t, rs: rs, clusters: clusters, hosts: map[string][]string{}, spokes: map[string]*secureSpoke{}}
	for _, c := range clusters {
		b.hosts[c] = []string{"svc-" + c}
	}
	return b
}

func (b *balanced) config(c string) string {
	var docs []string
	for i, n := range b.hosts[c] {
		docs = append(docs, serviceEntry(n, n+".demo.svc.cluster.local", 17400+i))
	}
	return strings.Join(docs, "---\n")
}

// watch attaches a delta ADS client to every replica (each retries until
// its replica serves).
func (b *balanced) watch() {
	h0 := b.rs.hubs[0]
	roots := h0.servingRoots(b.t)
	cert := h0.workloadCert(b.t, "default", "cluster.local", "demo", "watcher")
	var dials []func() *grpc.ClientConn
	for _, h := range b.rs.hubs {
		dials = append(dials, func() *grpc.ClientConn { return dialTLS(b.t, h.at(h.xds), roots, &cert) })
	}
	b.watchers = startWatchers(b.t, dials...)
}

// start starts the spokes, each enrolled at hub-0 and dialling via.
func (b *balanced) start(via *hub) {
	for _, c := range b.clusters {
		b.spokes[c] = startEnrolledSpoke(b.t, via, "spoke-"+c, "", c, b.config(c), b.rs.hubs[0].token(b.t, "default", c, "1h"), b.t.TempDir())
	}
}

// owners is who owns each cluster, as every replica agrees.
func (b *balanced) owners() (map[string]string, error) {
	out := map[string]string{}
	for _, h := range b.rs.hubs {
		self := h.replicas(b.t).Self
		for id, c := range h.spokesView(b.t) {
			if !c.Connected || !c.Synced {
				return nil, fmt.Errorf("%s holds %s not connected and synced", self, id)
			}
			if o, ok := out[id]; ok && o != c.Owner {
				return nil, fmt.Errorf("%s says %s owns %s, another replica %s", self, c.Owner, id, o)
			}
			out[id] = c.Owner
		}
	}
	if len(out) != len(b.clusters) {
		return nil, fmt.Errorf("%d clusters held, want %d", len(out), len(b.clusters))
	}
	return out, nil
}

// waitSpread waits until every replica owns at least one spoke, and
// returns the spokes per replica.
func (b *balanced) waitSpread() map[string]int {
	var spread map[string]int
	testwait.For(b.t, 60*time.Second, func() error {
		own, err := b.owners()
		if err != nil {
			return err
		}
		spread = map[string]int{}
		for _, o := range own {
			spread[o]++
		}
		for i := range b.rs.hubs {
			if id := fmt.Sprintf("hub-%d", i); spread[id] < 1 {
				return fmt.Errorf("spokes per replica %v: %s owns none", spread, id)
			}
		}
		return nil
	})
	return spread
}

// everywhere waits until every client holds every service.
func (b *balanced) everywhere() {
	b.t.Helper()
	var all []string
	for _, c := range b.clusters {
		for _, n := range b.hosts[c] {
			all = append(all, n+".demo.svc.cluster.local")
		}
	}
	for i, w := range b.watchers {
		testwait.For(b.t, 60*time.Second, func() error {
			if err := w.holds(all...); err != nil {
				return fmt.Errorf("client of hub-%d: %v", i, err)
			}
			return nil
		})
	}
}

// moves is the spokes moved by every replica.
func (b *balanced) moves() float64 {
	var n float64
	for _, h := range b.rs.hubs {
		n += scrape(b.t, h.url("/metrics"), "nave_hub_replica_shed_spokes_total")
	}
	return n
}

// finish checks that nothing moves any more at the spread, changes the
// config of a spoke that moved off hub-0 and waits for the change at
// every client, then checks that no client received a removal. It
// returns the spoke that changed.
func (b *balanced) finish() string {
	b.t.Helper()
	before := b.moves()
	if before < 1 {
		b.t.Errorf("%g spokes moved in all, want at least 1", before)
	}
	// Every replica's balancer has looked at the spread since, with no
	// move pending, and found it even: a move would have come first.
	testwait.For(b.t, 30*time.Second, func() error {
		for _, h := range b.rs.hubs {
			v := h.replicas(b.t)
			if sb := v.Spokes; sb.Pending != nil || !strings.HasPrefix(sb.Idle, "even:") {
				return fmt.Errorf("%s's spoke balancer: pending %v, idle %q", v.Self, sb.Pending, sb.Idle)
			}
		}
		return nil
	})
	if after := b.moves(); after != before {
		b.t.Errorf("spokes kept moving at an even spread: %g moves, then %g", before, after)
	}
	own, err := b.owners()
	if err != nil {
		b.t.Fatal(err)
	}
	var moved string
	for _, c := range b.clusters {
		if own["default/"+c] != "hub-0" {
			moved = c
			break
		}
	}
	checkNoRemovals(b.t, b.watchers, func(i int) string { return fmt.Sprintf("the client of hub-%d", i) }, func(name, _ string) {
		b.hosts[moved] = append(b.hosts[moved], name)
		writeFile(b.t, filepath.Join(b.spokes[moved].dir, "config.yaml"), b.config(moved))
	})
	b.everywhere()
	return moved
}

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
		testwait.For(t, 30*time.Second, func() error {
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
	b := newBalanced(t, rs, "c1", "c2", "c3", "c4")
	b.watch()
	start := time.Now()
	b.start(h0)
	spread := b.waitSpread()
	t.Logf("spread %v reached %s after the spokes started (spoke-shed-rate 2/s, spoke-min-age 1s)", spread, time.Since(start).Round(time.Millisecond))
	b.everywhere()
	if n := b.moves(); n < 2 {
		t.Errorf("%g spokes moved, want at least 2 (from 4, 0, 0)", n)
	}
	moved := b.finish()

	var up struct {
		Target string `json:"target"`
		Moves  int    `json:"moves"`
	}
	if err := harness.GetJSON(b.spokes[moved].url("/debug/uplink"), &up); err != nil {
		t.Fatal(err)
	}
	if up.Moves < 1 || up.Target == addr(h0.spokes) {
		t.Errorf("spoke %s, moved off hub-0: its uplink says target %s, %d moves", moved, up.Target, up.Moves)
	}
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

// TestReplicasBalanceSpokesThroughAService: three spokes reach the
// replicas through one round-robin address (a Service) while hub-1 and
// hub-2 are down, so all land on hub-0; no replica names a redirect.
// Once the others are back and ready, hub-0 moves spokes, which reconnect
// through the Service wherever it sends them, until each replica owns
// one; no client on any replica receives a removal, and a change of a
// moved spoke arrives everywhere.
func TestReplicasBalanceSpokesThroughAService(t *testing.T) {
	rs := newReplicaSet(t, 3, "--replicas.spoke-shed-rate", "2", "--replicas.spoke-min-age", "1s")
	h0, h1, h2 := rs.hubs[0], rs.hubs[1], rs.hubs[2]
	h1.proc.Stop(10 * time.Second)
	h2.proc.Stop(10 * time.Second)
	lb := startProxy(t, addr(h0.spokes), addr(h1.spokes), addr(h2.spokes))
	lb.SetRoundRobin(true)
	b := newBalanced(t, rs, "c1", "c2", "c3")
	b.watch()
	via := *h0
	via.spokes = lb.port()
	b.start(&via)
	for _, c := range b.clusters {
		h0.waitOwned(t, "default/"+c, "hub-0")
	}
	start := time.Now()
	h1.start()
	h2.start()
	spread := b.waitSpread()
	t.Logf("spread %v reached %s after hub-1 and hub-2 were started again (through a round-robin address, no redirect)", spread, time.Since(start).Round(time.Millisecond))
	b.everywhere()
	b.finish()
}
