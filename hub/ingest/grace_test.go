package ingest

import (
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
)

// syncState opens a spoke's stream of id on s and sends objs as its full
// state, then the synced marker.
func syncState(t *testing.T, s *Store, id ClusterIdentity, objs []*meshconfig.Object) *session {
	t.Helper()
	ss, err := s.open(id, origin{}, "127.0.0.1:1", meshconfig.DefaultDomainSuffix, 0, func(error) {})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if _, ok := ss.apply(o.Kind, []update{{name: o.Key(), obj: o}}, nil, 0); !ok {
			t.Fatal("a new session is not current")
		}
	}
	if !ss.synced() {
		t.Fatal("a new session is not current")
	}
	return ss
}

// held counts the objects s serves of id's cluster, and reports whether
// the cluster is listed at all.
func held(s *Store, id ClusterIdentity) (int, bool) {
	for _, c := range s.Clusters(id.Mesh) {
		if c.Name == id.Cluster {
			return len(c.Objects), true
		}
	}
	return 0, false
}

// TestDisconnectKeepsResourcesUntilGracePeriodEnds: a disconnected
// cluster is kept, stale, with everything it held until its grace period
// has passed to the nanosecond; then it is withdrawn, listed as such, and
// the change is reported (docs/design.md invariant 8: losing a spoke
// never blackholes).
func TestDisconnectKeepsResourcesUntilGracePeriodEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const grace = 200 * time.Millisecond
		var changes atomic.Int64 // OnChange runs on the grace timer's goroutine
		s := NewStore(StoreOptions{StaleGracePeriod: grace, OnChange: func(string, bool) { changes.Add(1) }})
		id := ClusterIdentity{Mesh: "m", Cluster: "c1"}
		objs := pushctxtest.EchoConfig(t, 80, 20)
		ss := syncState(t, s, id, objs)

		ss.close()
		disconnected := time.Now()
		st := s.Status()
		if len(st) != 1 || !st[0].Stale || st[0].Connected || !st[0].Synced || st[0].DisconnectedAt == nil ||
			st[0].WithdrawAt == nil || !st[0].WithdrawAt.Equal(disconnected.Add(grace)) {
			t.Errorf("disconnected cluster status = %+v, want stale, still synced, withdrawn at %v", st, disconnected.Add(grace))
		}
		for _, c := range s.Clusters("m") {
			if !c.Stale || c.Connected {
				t.Errorf("disconnected cluster input = %+v, want stale", c)
			}
		}

		time.Sleep(grace - time.Nanosecond)
		synctest.Wait()
		if n, _ := held(s, id); n != len(objs) {
			t.Fatalf("a nanosecond before the grace period's end the hub holds %d objects, want all %d", n, len(objs))
		}
		calls := changes.Load()

		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if _, ok := held(s, id); ok {
			t.Fatal("the stale cluster is still held once its grace period has passed")
		}
		// Withdrawn, it is still listed: when, why, what it held (issue 18).
		if sts := s.Status(); len(sts) != 1 || sts[0].Withdrawn == nil || sts[0].Withdrawn.Resources != len(objs) ||
			!strings.Contains(sts[0].Withdrawn.Reason, "grace period") || !sts[0].Withdrawn.At.Equal(disconnected.Add(grace)) || len(sts[0].Resources) != 0 {
			t.Errorf("after withdrawal: status %+v, want m/c1 listed as withdrawn after the grace period with %d resources", sts, len(objs))
		}
		if len(s.Meshes()) != 0 {
			t.Errorf("after withdrawal: meshes %v; want none", s.Meshes())
		}
		if changes.Load() == calls {
			t.Error("OnChange did not report the withdrawal")
		}
	})
}

// TestReconnectWithinGracePeriodCancelsWithdrawal: a cluster whose spoke
// comes back within the grace period is never withdrawn, even before its
// new stream synced.
func TestReconnectWithinGracePeriodCancelsWithdrawal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const grace = 300 * time.Millisecond
		s := NewStore(StoreOptions{StaleGracePeriod: grace})
		id := ClusterIdentity{Mesh: "m", Cluster: "c1"}
		objs := pushctxtest.EchoConfig(t, 80, 20)
		syncState(t, s, id, objs).close()

		time.Sleep(grace / 2)
		ss, err := s.open(id, origin{}, "127.0.0.1:2", meshconfig.DefaultDomainSuffix, 0, func(error) {})
		if err != nil {
			t.Fatal(err)
		}
		ss.apply(objs[0].Kind, []update{{name: objs[0].Key(), obj: objs[0]}}, nil, 0)
		if st := s.Status(); len(st) != 1 || !st[0].Connected || st[0].Stale || st[0].WithdrawAt != nil {
			t.Errorf("reconnected cluster status = %+v, want connected, not stale, no withdrawal", st)
		}

		time.Sleep(3 * grace)
		synctest.Wait()
		if n, _ := held(s, id); n != len(objs) {
			t.Errorf("%v after the reconnect the hub holds %d objects, want all %d", 3*grace, n, len(objs))
		}
	})
}
