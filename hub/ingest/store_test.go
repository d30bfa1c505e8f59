package ingest

import (
	"fmt"
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
