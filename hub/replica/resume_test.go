package replica_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/hub/replica"
)

// relayTo returns r's relay of id to peer, and whether it has one.
func relayTo(r *replica.Relayer, peer string, id ingest.ClusterIdentity) (replica.RelayStatus, bool) {
	for _, s := range r.Status() {
		if s.Peer == peer && s.Cluster == id {
			return s, true
		}
	}
	return replica.RelayStatus{}, false
}

// TestRelayResumesFromWhatThePeerHolds: the first relay of a cluster to a
// peer that holds nothing sends it in full; after a failover the new
// owner's relay to that peer resumes from what the peer holds (the old
// owner's relay) and sends only what the spoke changed meanwhile — one
// removal, one modification, one addition — and the peer removes exactly
// the one resource the spoke removed.
func TestRelayResumesFromWhatThePeerHolds(t *testing.T) {
	a, b, c := newNode(t, "a"), newNode(t, "b"), newNode(t, "c")
	connect(a, b, c)
	x := ingest.ClusterIdentity{Mesh: "default", Cluster: "x"}
	names := make([]string, 100)
	for i := range names {
		names[i] = fmt.Sprintf("s%03d", i)
	}
	orig := serviceEntries(t, names...)
	sa := dialSpoke(t, a, x)
	sa.state(orig)
	want := a.objects(x)
	holds(t, b, x, want, "a")
	holds(t, c, x, want, "a")
	var first replica.RelayStatus
	eventually(t, func() error {
		var ok bool
		first, ok = relayTo(a.relayer, "c", x)
		// Each message's bytes are counted once the send returned, which
		// can be after its ACK: wait until every ACKed one (and Resume,
		// which the ACKs do not count) is.
		if !ok || first.Acked < 2 || first.Messages < first.Acked+1 {
			return fmt.Errorf("a's relay to c: %+v", first)
		}
		return nil
	})
	if first.Resumed {
		t.Errorf("the first relay to a peer that held nothing resumed: %+v", first)
	}
	wc := watchRemovals(t, c, x)

	a.stop()
	// The spoke re-homes to b, having removed s000, changed s001 (its
	// port) and added s100 meanwhile.
	now := append(serviceEntries(t, "s001", "s100"), orig[2:]...)
	if now[0].Version == orig[1].Version {
		t.Fatal("s001 did not change")
	}
	sb := dialSpoke(t, b, x)
	sb.state(now)
	want = b.objects(x)
	if len(want) != 100 {
		t.Fatalf("b holds %d objects, want 100", len(want))
	}
	holds(t, c, x, want, "b")
	eventually(t, func() error { // the watch polls: let it see the last state
		if len(wc.seen()) == 0 {
			return fmt.Errorf("no removal seen at c yet")
		}
		return nil
	})
	if got := wc.end(); !slices.Equal(got, []string{"ServiceEntry demo/s000"}) {
		t.Errorf("c removed %v, want only what the spoke removed", got)
	}
	var second replica.RelayStatus
	eventually(t, func() error {
		var ok bool
		second, ok = relayTo(b.relayer, "c", x)
		if !ok || !second.Resumed || second.Acked < 1 || second.Messages < second.Acked+1 {
			return fmt.Errorf("b's relay to c: %+v, want resumed", second)
		}
		return nil
	})
	if second.Bytes*10 > first.Bytes {
		t.Errorf("b relayed %d bytes to c, the full relay was %d: want a resumed relay to send only the three changes", second.Bytes, first.Bytes)
	}
	t.Logf("full relay %d bytes in %d messages; resumed relay after a failover %d bytes in %d messages", first.Bytes, first.Messages, second.Bytes, second.Messages)
}
