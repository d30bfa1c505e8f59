package replica_test

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/hub/replica"
)

// own is a spoke of this replica whose stream opened age ago, synced or
// not; relayed a peer's spoke held here through its relay.
func own(cluster string, age time.Duration, synced bool) ingest.Holding {
	return ingest.Holding{State: ingest.State{ClusterIdentity: ingest.ClusterIdentity{Mesh: "m", Cluster: cluster}, Owner: "hub-0", Connected: true, Synced: synced, EverSynced: true,
		Epoch: ingest.Epoch{At: time.Now().Add(-age).UnixNano(), Replica: "hub-0"}}}
}

func relayed(cluster, owner string) ingest.Holding {
	return ingest.Holding{State: ingest.State{ClusterIdentity: ingest.ClusterIdentity{Mesh: "m", Cluster: cluster}, Owner: owner, Relayed: true, Connected: true, Synced: true, EverSynced: true,
		Epoch: ingest.Epoch{At: time.Now().UnixNano(), Replica: owner}}}
}

// TestPlanSpokeMove: the decision sheds only above the share and at least
// two above the least-loaded ready peer, names that peer and its address,
// moves the oldest synced spoke past the minimum age, and never an
// unsynced or young one.
// polled marks h as a polled spoke's holding.
func polled(h ingest.Holding) ingest.Holding {
	h.Polled = true
	return h
}

func TestPlanSpokeMove(t *testing.T) {
	peers := []replica.SpokePeer{{ID: "hub-1", Address: "10.0.0.1:15012"}, {ID: "hub-2", Address: "10.0.0.2:15012"}}
	four := []ingest.Holding{own("c1", time.Hour, true), own("c2", 2*time.Hour, true), own("c3", time.Hour, true), own("c4", time.Hour, true)}
	cases := []struct {
		name     string
		holdings []ingest.Holding
		peers    []replica.SpokePeer
		minAge   time.Duration
		move     string // cluster moved; "" none
		to       string
	}{
		{name: "all four here, peers empty: the oldest moves to the lowest id", holdings: four, peers: peers, minAge: time.Minute, move: "c2", to: "hub-1"},
		{name: "alone: nothing", holdings: four, peers: nil, minAge: time.Minute},
		{name: "3,1,0: to the empty peer", holdings: append(four[1:], relayed("c9", "hub-1")), peers: peers, minAge: time.Minute, move: "c2", to: "hub-2"},
		{name: "2,1,1 is even", holdings: []ingest.Holding{four[0], four[1], relayed("c3", "hub-1"), relayed("c4", "hub-2")}, peers: peers, minAge: time.Minute},
		{name: "2,0,0 with 2 spokes: share 1, least 0, moves", holdings: four[:2], peers: peers, minAge: time.Minute, move: "c2", to: "hub-1"},
		{name: "1,0,0 never moves (hysteresis: it would just move back)", holdings: four[:1], peers: peers, minAge: time.Minute},
		{name: "2,1 of two replicas stays (a move would make 1,2)", holdings: []ingest.Holding{four[0], four[1], relayed("c3", "hub-1")}, peers: peers[:1], minAge: time.Minute},
		{name: "gossip counts when above the relays seen", holdings: four[:3], peers: []replica.SpokePeer{{ID: "hub-1", Spokes: 2}, {ID: "hub-2", Spokes: 2}}, minAge: time.Minute},
		{name: "none synced", holdings: []ingest.Holding{own("c1", time.Hour, false), own("c2", time.Hour, false), own("c3", time.Hour, false)}, peers: peers, minAge: time.Minute},
		{name: "none old enough", holdings: []ingest.Holding{own("c1", time.Second, true), own("c2", time.Second, true), own("c3", time.Second, true)}, peers: peers, minAge: time.Minute},
		{name: "the old synced one, not the older unsynced", holdings: []ingest.Holding{own("c1", 3*time.Hour, false), own("c2", time.Hour, true), own("c3", time.Second, true)}, peers: peers, minAge: time.Minute, move: "c2", to: "hub-1"},
		{name: "a polled spoke is not moved (hub/poll decides who dials it): the next oldest is", holdings: []ingest.Holding{polled(own("c2", 2*time.Hour, true)), four[0], four[2], four[3]}, peers: peers, minAge: time.Minute, move: "c1", to: "hub-1"},
		{name: "only polled spokes: nothing moves", holdings: []ingest.Holding{polled(four[0]), polled(four[1]), polled(four[2])}, peers: peers, minAge: time.Minute},
		{name: "a disconnected (stale) cluster counts for nobody", holdings: append(four[:2:2], ingest.Holding{State: ingest.State{ClusterIdentity: ingest.ClusterIdentity{Mesh: "m", Cluster: "c5"}, Owner: "hub-0"}}), peers: peers[:1], minAge: time.Minute, move: "c2", to: "hub-1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mv, ok, why := replica.PlanSpokeMove("hub-0", c.holdings, c.peers, time.Now(), c.minAge)
			if c.move == "" {
				if ok {
					t.Fatalf("moves %s to %s (%d here, share %d, least %d), want no move", mv.Cluster, mv.To, mv.Mine, mv.Share, mv.Least)
				}
				if why == "" {
					t.Error("no reason given for not moving")
				}
				return
			}
			if !ok {
				t.Fatalf("no move: %s", why)
			}
			if mv.Cluster.Cluster != c.move || mv.To != c.to {
				t.Errorf("moves %s to %s, want %s to %s", mv.Cluster.Cluster, mv.To, c.move, c.to)
			}
			for _, p := range c.peers {
				if p.ID == mv.To && mv.Redirect != p.Address {
					t.Errorf("redirect %q, want %s's address %q", mv.Redirect, p.ID, p.Address)
				}
			}
		})
	}
}

// TestPlanSpokeMoveConverges simulates three replicas deciding in turn,
// each moved spoke landing on the peer the decision names: from all
// spokes on one replica, the spread ends even (each within one of the
// others) for 2 to 12 spokes, and no spoke moves more than once on the
// way.
func TestPlanSpokeMoveConverges(t *testing.T) {
	ids := []string{"hub-0", "hub-1", "hub-2"}
	for n := 2; n <= 12; n++ {
		owner := map[string]string{}
		for i := range n {
			owner[fmt.Sprintf("c%d", i)] = "hub-0"
		}
		moves := map[string]int{}
		for round := 0; round < 100; round++ {
			moved := false
			for _, self := range ids {
				var hs []ingest.Holding
				for c, o := range owner {
					h := ingest.Holding{State: ingest.State{ClusterIdentity: ingest.ClusterIdentity{Mesh: "m", Cluster: c}, Owner: o, Relayed: o != self, Connected: true, Synced: true,
						Epoch: ingest.Epoch{At: time.Now().Add(-time.Hour).UnixNano(), Replica: o}}}
					hs = append(hs, h)
				}
				var peers []replica.SpokePeer
				for _, id := range ids {
					if id != self {
						peers = append(peers, replica.SpokePeer{ID: id})
					}
				}
				if mv, ok, _ := replica.PlanSpokeMove(self, hs, peers, time.Now(), time.Minute); ok {
					owner[mv.Cluster.Cluster] = mv.To
					moves[mv.Cluster.Cluster]++
					moved = true
				}
			}
			if !moved {
				break
			}
		}
		count := map[string]int{}
		for _, o := range owner {
			count[o]++
		}
		lo, hi := n, 0
		for _, id := range ids {
			lo, hi = min(lo, count[id]), max(hi, count[id])
		}
		if hi-lo > 1 {
			t.Errorf("%d spokes end %v, want each within one of the others", n, count)
		}
		for c, k := range moves {
			if k > 1 {
				t.Errorf("%d spokes: %s moved %d times", n, c, k)
			}
		}
	}
}

// TestSpokeBalancerMovesOneAtATime: the balancer moves a spoke, then
// waits until it has landed (connected again at a newer epoch) before the
// next, and reports spokes per replica and its moves. On synctest's fake
// clock: the moves are timers.
func TestSpokeBalancerMovesOneAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		hs := []ingest.Holding{own("c1", time.Hour, true), own("c2", 2*time.Hour, true), own("c3", 3*time.Hour, true), own("c4", 4*time.Hour, true)}
		moved := make(chan string, 10)
		b := replica.NewSpokeBalancer(replica.SpokeBalancerOptions{Self: "hub-0",
			Peers: func() []replica.SpokePeer { return []replica.SpokePeer{{ID: "hub-1"}, {ID: "hub-2"}} },
			In: fakeIngest{holdings: func() []ingest.Holding { mu.Lock(); defer mu.Unlock(); return append([]ingest.Holding(nil), hs...) },
				move: func(id ingest.ClusterIdentity, epoch ingest.Epoch, reason, redirect string) bool {
					mu.Lock()
					defer mu.Unlock()
					for i := range hs {
						if hs[i].ClusterIdentity == id && hs[i].Epoch == epoch {
							hs[i].Connected = false // closed; lands later
							moved <- id.Cluster
							return true
						}
					}
					t.Errorf("moved %s at %s, which is not held", id, epoch)
					return false
				}},
			Rate: 1000, MinAge: time.Minute, Interval: 10 * time.Millisecond})
		if _, ok := b.Tick(); !ok {
			t.Fatal("no move from 4,0,0")
		}
		first := <-moved
		if first != "c4" {
			t.Errorf("moved %s first, want the oldest, c4", first)
		}
		time.Sleep(20 * time.Millisecond) // the fake clock: past the rate's interval, so only the landing holds the next move
		if mv, ok := b.Tick(); ok {
			t.Fatalf("moved %s while %s had not landed", mv.Cluster, first)
		}
		if st := b.Status(); st.Pending == nil || st.Idle == "" {
			t.Errorf("status while waiting: %+v", st)
		}
		// c4 lands on hub-1: relayed here with hub-1's newer epoch.
		mu.Lock()
		hs[3] = relayed("c4", "hub-1")
		mu.Unlock()
		mv, ok := b.Tick()
		if !ok || mv.To != "hub-2" {
			t.Fatalf("after c4 landed on hub-1: move %+v %v, want one to hub-2", mv, ok)
		}
		if second := <-moved; second != "c3" {
			t.Errorf("moved %s second, want c3", second)
		}
		mu.Lock()
		hs[2] = relayed("c3", "hub-2")
		mu.Unlock()
		if mv, ok := b.Tick(); ok {
			t.Fatalf("at 2,1,1 moved %s", mv.Cluster)
		}
		// The balancer counts a move after Move returns, which may be after
		// this test saw it.
		synctest.Wait()
		st := b.Status()
		if st.Moved != 2 || st.Spokes["hub-0"] != 2 || st.Spokes["hub-1"] != 1 || st.Spokes["hub-2"] != 1 {
			t.Errorf("status %+v, want 2 moved and 2,1,1", st)
		}
		off := replica.NewSpokeBalancer(replica.SpokeBalancerOptions{Self: "hub-0", Peers: func() []replica.SpokePeer { return []replica.SpokePeer{{ID: "hub-1"}} },
			In: fakeIngest{holdings: func() []ingest.Holding { return hs },
				move: func(ingest.ClusterIdentity, ingest.Epoch, string, string) bool {
					t.Error("moved with rate 0")
					return false
				}}})
		if _, ok := off.Tick(); ok {
			t.Error("rate 0 moves")
		}
	})
}
