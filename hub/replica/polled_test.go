package replica

import (
	"fmt"
	"testing"

	"github.com/navemesh/nave/hub/ingest"
)

// Every polled spoke has exactly one owner among the members, the same
// whatever order they are listed in; a member leaving moves only the
// spokes it owned, and the spokes spread over the members.
func TestPollOwner(t *testing.T) {
	members := []string{"hub-0", "hub-1", "hub-2"}
	owners := map[ingest.ClusterIdentity]string{}
	count := map[string]int{}
	for i := range 300 {
		id := ingest.ClusterIdentity{Mesh: "default", Cluster: fmt.Sprintf("c%d", i)}
		o := pollOwner(id, members)
		if o2 := pollOwner(id, []string{"hub-2", "hub-0", "hub-1"}); o2 != o {
			t.Fatalf("%s: owner %s or %s depending on the order of members", id, o, o2)
		}
		owners[id] = o
		count[o]++
	}
	for _, m := range members {
		if count[m] < 50 {
			t.Errorf("member %s owns %d of 300 polled spokes: %v", m, count[m], count)
		}
	}
	for id, o := range owners {
		got := pollOwner(id, []string{"hub-0", "hub-2"})
		if o != "hub-1" && got != o {
			t.Errorf("%s moved from %s to %s when hub-1 left", id, o, got)
		}
		if got == "hub-1" {
			t.Errorf("%s owned by hub-1, which left", id)
		}
	}
	if got := pollOwner(ingest.ClusterIdentity{Mesh: "m", Cluster: "c"}, nil); got != "" {
		t.Errorf("owner without members: %q", got)
	}
}
