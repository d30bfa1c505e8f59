package replica_test

import (
	"fmt"
	"slices"
	"strconv"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/hub/replica"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/protocol"
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
	testwait.For(t, waitFor, func() error {
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
	testwait.For(t, waitFor, func() error { // the watch polls: let it see the last state
		if len(wc.seen()) == 0 {
			return fmt.Errorf("no removal seen at c yet")
		}
		return nil
	})
	if got := wc.end(); !slices.Equal(got, []string{"ServiceEntry demo/s000"}) {
		t.Errorf("c removed %v, want only what the spoke removed", got)
	}
	var second replica.RelayStatus
	testwait.For(t, waitFor, func() error {
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

// resume sends Resume on s and reads the hints and the answer.
func (s *spokeStream) resume() (protocol.Held, bool) {
	s.t.Helper()
	s.nonce++
	nonce := strconv.Itoa(s.nonce)
	if err := s.stream.Send(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: protocol.ResumeTypeURL, Nonce: nonce}); err != nil {
		s.t.Fatal(err)
	}
	held, resumed, err := protocol.ReadResume(s.stream.Recv, nonce, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	return held, resumed
}

// TestResumedStreamOvertakenByANewerRelay: the spoke's stream resumes on
// b (b holds the cluster from a's relay) and, before its synced marker,
// the spoke's newer stream opens on a, whose relay of that later epoch
// reaches b and supersedes the resumed stream. The removal the resumed
// stream staged, and its marker, change nothing at b: b ends holding
// exactly what the newest stream said, nothing lost and nothing
// resurrected.
func TestResumedStreamOvertakenByANewerRelay(t *testing.T) {
	a, b := newNode(t, "a"), newNode(t, "b")
	connect(a, b)
	x := ingest.ClusterIdentity{Mesh: "default", Cluster: "x"}
	objs := serviceEntries(t, "alpha", "beta", "gamma")
	s1 := dialSpoke(t, a, x)
	s1.state(objs)
	want := a.objects(x)
	holds(t, b, x, want, "a")
	wb := watchRemovals(t, b, x)

	s2 := dialSpoke(t, b, x)
	held, resumed := s2.resume()
	if !resumed || held.Count() != 3 {
		t.Fatalf("b: resumed %v with %d held, want resumed with 3", resumed, held.Count())
	}
	s2.send(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: objs[0].Kind.TypeURL, RemovedResources: []string{objs[0].Key()}}) // staged

	// The spoke's newer stream, on a, with all three.
	s3 := dialSpoke(t, a, x)
	s3.state(objs)
	h := holds(t, b, x, want, "a")
	if h.Epoch.Before(holds(t, a, x, want, "a").Epoch) {
		t.Errorf("b holds epoch %s, older than a's", h.Epoch)
	}
	// The overtaken stream's marker: NACKed or its stream ended; either
	// way nothing changes at b.
	s2.nonce++
	_ = s2.stream.Send(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: protocol.SyncedTypeURL, Nonce: strconv.Itoa(s2.nonce)})
	for {
		r, err := s2.stream.Recv()
		if err != nil {
			if status.Code(err) != codes.Aborted {
				t.Errorf("the overtaken stream ended with %v, want Aborted", err)
			}
			break
		}
		if r.GetErrorDetail() == nil {
			t.Errorf("the overtaken stream's message %s was ACKed", r.GetResponseNonce())
		}
	}
	holds(t, b, x, want, "a")
	if got := wb.end(); len(got) > 0 {
		t.Errorf("b removed %v, which the newest stream still has", got)
	}
}
