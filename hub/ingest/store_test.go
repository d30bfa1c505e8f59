package ingest

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/navemesh/nave/shared/meshconfig"
)

// TestRecordObjectsStaySorted: through random puts, updates and removals
// of a synced cluster, objects' list equals a fresh sort of what the record
// holds, and a list handed out earlier is never changed afterwards.
func TestRecordObjectsStaySorted(t *testing.T) {
	kinds := meshconfig.Kinds()[:3]
	s := newRecord(ClusterIdentity{Mesh: "m", Cluster: "c"})
	// Synced: puts and removals apply at once (unsynced, they are staged
	// and the list stays empty).
	s.Synced, s.EverSynced = true, true
	rng := rand.New(rand.NewPCG(3, 5))
	type held struct {
		list, copy []*meshconfig.Object
	}
	var handed []held
	for step := range 3000 {
		k := kinds[rng.IntN(len(kinds))]
		o := &meshconfig.Object{Kind: k, Namespace: fmt.Sprint("ns-", rng.IntN(3)), Name: fmt.Sprint("o-", rng.IntN(30)), Version: fmt.Sprint(step)}
		typeURL := k.Kind
		if rng.IntN(3) == 0 {
			s.remove(typeURL, o.Key())
		} else {
			s.put(typeURL, o, 1)
		}
		if rng.IntN(5) != 0 && step%97 != 0 {
			continue // several changes between reads (and sometimes a batch over the edit limit)
		}
		got := s.objects()
		var want []*meshconfig.Object
		for _, byName := range s.resources {
			for _, e := range byName {
				want = append(want, e.obj)
			}
		}
		slices.SortFunc(want, compareObjects)
		if len(want) == 0 && step > 100 {
			t.Fatalf("step %d: the record holds nothing", step)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("step %d: input lists %d objects out of order or stale, want %d", step, len(got), len(want))
		}
		handed = append(handed, held{got, slices.Clone(got)})
	}
	for i, h := range handed {
		if !slices.Equal(h.list, h.copy) {
			t.Fatalf("the list handed out %d-th was changed afterwards", i)
		}
	}
}

// TestRecordChangedSince: through random puts, updates and removals of a
// synced cluster (and a prune), what changedSince reports since any rev
// the log still reaches, applied to the state at that rev, gives the
// current state; a rev the log no longer reaches, or not yet reached, is
// refused.
func TestRecordChangedSince(t *testing.T) {
	kinds := meshconfig.Kinds()[:3]
	s := newRecord(ClusterIdentity{Mesh: "m", Cluster: "c"})
	s.Synced, s.EverSynced = true, true
	s.session = 1
	created := s.logBase
	rng := rand.New(rand.NewPCG(7, 11))
	// snapshot is what the record holds, by type URL then name (version).
	snapshot := func() map[string]map[string]string {
		out := map[string]map[string]string{}
		for typeURL, byName := range s.resources {
			for name, e := range byName {
				if out[typeURL] == nil {
					out[typeURL] = map[string]string{}
				}
				out[typeURL][name] = e.obj.Version
			}
		}
		return out
	}
	type seen struct {
		rev   uint64
		state map[string]map[string]string
	}
	var history []seen
	for step := range 4000 {
		k := kinds[rng.IntN(len(kinds))]
		o := &meshconfig.Object{Kind: k, Namespace: "ns", Name: fmt.Sprint("o-", rng.IntN(40)), Version: fmt.Sprint(step)}
		switch {
		case step == 2000:
			s.session = 2 // a new stream's full state: everything not sent again is pruned
			s.put(k.Kind, o, 2)
			s.prune()
		case rng.IntN(3) == 0:
			s.remove(k.Kind, o.Key())
		default:
			s.put(k.Kind, o, s.session)
		}
		history = append(history, seen{s.rev, snapshot()})
		now := snapshot()
		for _, h := range []seen{history[rng.IntN(len(history))], history[len(history)-1]} {
			changes, ok := s.changedSince(h.rev)
			if !ok {
				if h.rev >= s.logBase {
					t.Fatalf("step %d: rev %d refused though the log reaches back to %d", step, h.rev, s.logBase)
				}
				continue
			}
			got := map[string]map[string]string{}
			for typeURL, byName := range h.state {
				got[typeURL] = maps.Clone(byName)
			}
			for typeURL, byName := range changes {
				for name, o := range byName {
					if o == nil {
						delete(got[typeURL], name)
						continue
					}
					if got[typeURL] == nil {
						got[typeURL] = map[string]string{}
					}
					got[typeURL][name] = o.Version
				}
			}
			for typeURL := range got {
				if len(got[typeURL]) == 0 {
					delete(got, typeURL)
				}
			}
			if !maps.EqualFunc(got, now, maps.Equal) {
				t.Fatalf("step %d: the state at rev %d with the changes since is not the current state", step, h.rev)
			}
		}
	}
	if s.logBase == created {
		t.Fatal("the log never overflowed: the test does not reach a refused rev")
	}
	if _, ok := s.changedSince(s.logBase - 1); ok {
		t.Error("a rev older than the log was answered")
	}
	if _, ok := s.changedSince(s.rev + 1); ok {
		t.Error("a rev not reached yet was answered")
	}
}

// TestRecordRevsOfAReplacedRecord: a record dropped and made again for the
// same cluster starts its revs above every rev of the one it replaced, so
// a reader of the old one (a relay that saw its rev) is given the whole
// state, never the new record's changes as if they followed the old.
func TestRecordRevsOfAReplacedRecord(t *testing.T) {
	id := ClusterIdentity{Mesh: "m", Cluster: "c"}
	k := meshconfig.Kinds()[0]
	old := newRecord(id)
	old.Synced, old.EverSynced, old.session = true, true, 1
	for i := range 5 {
		old.put(k.Kind, &meshconfig.Object{Kind: k, Namespace: "ns", Name: fmt.Sprint("o-", i), Version: "1"}, 1)
	}
	seen := old.rev
	again := newRecord(id)
	again.Synced, again.EverSynced, again.session = true, true, 1
	for i := range 9 {
		again.put(k.Kind, &meshconfig.Object{Kind: k, Namespace: "ns", Name: fmt.Sprint("n-", i), Version: "1"}, 1)
	}
	if changes, ok := again.changedSince(seen); ok {
		t.Fatalf("the old record's rev %d answered by its replacement with %d types of changes: the old record's objects would never be removed", seen, len(changes))
	}
	if _, ok := again.changedSince(again.logBase); !ok {
		t.Error("the replacement refuses its own first rev")
	}
}
