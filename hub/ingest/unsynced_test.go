package ingest_test

import (
	"maps"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/xds/mesh"
)

// TestUnsyncedClusterContributesNothing: a spoke that dies in the middle
// of its first full state leaves nothing to serve — its resources wait for
// a synced marker that never comes (issue 18 item 1).
func TestUnsyncedClusterContributesNothing(t *testing.T) {
	f := newFixture(t, time.Hour)
	s := f.dial(t, "m", "c1")
	s.sendState(decode(t, fullState))
	if held := f.objects("m", "c1"); len(held) != 0 {
		t.Errorf("before its first synced marker the cluster contributes %v, want nothing", refs(held))
	}
	if st, ok := f.status("m", "c1"); !ok || st.Pending != len(decode(t, fullState)) || len(st.Resources) != 0 {
		t.Errorf("status %+v, want every resource pending and none held", st)
	}
	s.close()
	testwait.Until(t, "the cluster is disconnected", func() bool {
		st, ok := f.status("m", "c1")
		return ok && !st.Connected
	})
	if held := f.objects("m", "c1"); len(held) != 0 {
		t.Errorf("after the spoke died unsynced the cluster contributes %v, want nothing", refs(held))
	}
}

// TestReconnectPartialStateKeepsTheLastSynced: a reconnecting spoke's new
// full state replaces the last synced one only at its synced marker; one
// that dies half-way changes nothing (issue 18 item 1).
func TestReconnectPartialStateKeepsTheLastSynced(t *testing.T) {
	f := newFixture(t, time.Hour)
	s1 := f.dial(t, "m", "c1")
	s1.sync(decode(t, fullState))
	before := f.objects("m", "c1")
	s1.close()

	changed := decode(t, strings.NewReplacer("weight: 80", "weight: 70", "weight: 20", "weight: 30").Replace(fullState))
	changed = changed[:1] // the changed VirtualService only: half a state
	for range 2 {
		s := f.dial(t, "m", "c1")
		s.sendState(changed)
		s.acked(s.send(vsType, nil, "demo/echo-beta")) // and a removal
		if got := f.objects("m", "c1"); !maps.Equal(got, before) {
			t.Fatalf("an unsynced reconnect changed the served state:\nbefore %v\n   now %v", refs(before), refs(got))
		}
		s.close()
		testwait.Until(t, "the cluster is disconnected", func() bool {
			st, ok := f.status("m", "c1")
			return ok && !st.Connected
		})
		if got := f.objects("m", "c1"); !maps.Equal(got, before) {
			t.Fatalf("a reconnect that died unsynced changed the served state:\nbefore %v\n   now %v", refs(before), refs(got))
		}
	}

	s := f.dial(t, "m", "c1")
	s.sendState(changed)
	s.synced()
	got := f.objects("m", "c1")
	if len(got) != 1 || got["VirtualService demo/echo"] == nil || got["VirtualService demo/echo"].Version != changed[0].Version {
		t.Errorf("after the synced marker the hub holds %v, want only the changed demo/echo", refs(got))
	}
}

// TestWithdrawnClusterListedUntilItReconnects: a cluster withdrawn after
// its grace period stays at /debug/spokes (issue 18 item 6) until it
// reconnects.
func TestWithdrawnClusterListedUntilItReconnects(t *testing.T) {
	f := newFixture(t, 50*time.Millisecond)
	s := f.dial(t, "m", "c1")
	s.sync(decode(t, fullState))
	s.close()
	testwait.Until(t, "the cluster is withdrawn", func() bool {
		st, ok := f.status("m", "c1")
		return ok && st.Withdrawn != nil
	})
	if n := f.metric(t, "nave_hub_ingest_clusters_withdrawn"); n != 1 {
		t.Errorf("nave_hub_ingest_clusters_withdrawn = %v, want 1", n)
	}
	f.dial(t, "m", "c1")
	testwait.Until(t, "the reconnected cluster is no longer listed as withdrawn", func() bool {
		st, ok := f.status("m", "c1")
		return ok && st.Withdrawn == nil && st.Connected
	})
	if n := f.metric(t, "nave_hub_ingest_clusters_withdrawn"); n != 0 {
		t.Errorf("nave_hub_ingest_clusters_withdrawn = %v after the reconnect, want 0", n)
	}
}

// TestReadyWaitsForExpectedClustersUntilTheGraceEnds: during the startup
// grace a mesh is ready only once every expected cluster of it synced;
// the grace's end reports the meshes still waiting, which are then ready
// with what came back (issue 14).
func TestReadyWaitsForExpectedClustersUntilTheGraceEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const grace = 300 * time.Millisecond
		expected := []ingest.ClusterIdentity{{Mesh: "m", Cluster: "c1"}, {Mesh: "m", Cluster: "c2"}, {Mesh: "n", Cluster: "x"}}
		var mu sync.Mutex // OnChange runs on the grace timer's goroutine
		changed := map[string]bool{}
		reported := func() map[string]bool {
			mu.Lock()
			defer mu.Unlock()
			return maps.Clone(changed)
		}
		store := ingest.NewStore(ingest.StoreOptions{StaleGracePeriod: time.Hour, StartupGrace: grace,
			Expected: func() []ingest.ClusterIdentity { return expected },
			OnChange: func(m string, _ bool) { mu.Lock(); defer mu.Unlock(); changed[m] = true }})
		c1 := mesh.ClusterInput{Name: "c1", Connected: true, Synced: true}
		c2 := mesh.ClusterInput{Name: "c2", Connected: true, Synced: true}
		if store.Ready("m", []mesh.ClusterInput{c1}) {
			t.Error("mesh m ready with c1 alone during the startup grace")
		}
		if !store.Ready("m", []mesh.ClusterInput{c1, c2}) {
			t.Error("mesh m not ready with every expected cluster synced")
		}
		if !store.Ready("other", []mesh.ClusterInput{{Name: "z", Synced: true}}) {
			t.Error("a mesh with no expected cluster is not ready once one synced")
		}
		if store.Ready("other", []mesh.ClusterInput{{Name: "z"}}) {
			t.Error("a mesh is ready with no cluster synced")
		}
		missing := 0
		for _, st := range store.Status() {
			if st.Missing != nil {
				missing++
			}
		}
		if missing != 3 {
			t.Errorf("status lists %d missing clusters, want the 3 expected ones", missing)
		}

		time.Sleep(grace - time.Nanosecond)
		synctest.Wait()
		if got := reported(); len(got) != 0 {
			t.Errorf("before the grace's end: changes reported for %v", got)
		}
		if store.Ready("m", []mesh.ClusterInput{c1}) {
			t.Error("just before the grace's end mesh m is ready with c1 alone")
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if got := reported(); !got["m"] || !got["n"] || len(got) != 2 {
			t.Errorf("the grace's end reported %v, want meshes m and n", got)
		}
		if !store.Ready("m", []mesh.ClusterInput{c1}) {
			t.Error("after the startup grace mesh m is not ready with c1")
		}
	})
}
