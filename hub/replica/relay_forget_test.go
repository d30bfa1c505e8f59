package replica

import (
	"sync"
	"testing"

	"github.com/navemesh/nave/hub/ingest"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// heldIngest holds the clusters of its map, as their owner's peer.
type heldIngest struct {
	mu   sync.Mutex
	held map[ingest.ClusterIdentity]ingest.Holding
}

func (f *heldIngest) Holdings(flt ingest.HoldingFilter) []ingest.Holding {
	f.mu.Lock()
	defer f.mu.Unlock()
	if h, ok := f.held[flt.Only]; ok {
		return []ingest.Holding{h}
	}
	return nil
}
func (*heldIngest) Relay(protocolv1.Sync_PushServer, ingest.ClusterIdentity, string, ingest.Epoch) error {
	return nil
}
func (*heldIngest) Move(ingest.ClusterIdentity, ingest.Epoch, string, string) bool { return false }
func (*heldIngest) WithdrawRelayed(ingest.ClusterIdentity, ingest.Epoch, string) bool {
	return false
}

// TestRelayerForgetsAClusterNoLongerHeld: what the Relayer keeps of a
// cluster between its relays (its last owner, the epoch each peer got in
// full) goes once the cluster is no longer held, so that clusters coming
// and going do not grow its maps.
func TestRelayerForgetsAClusterNoLongerHeld(t *testing.T) {
	id := ingest.ClusterIdentity{Mesh: "m", Cluster: "x"}
	in := &heldIngest{held: map[ingest.ClusterIdentity]ingest.Holding{
		// Owned and relayed by replica b: nothing for this replica to relay.
		id: {State: ingest.State{ClusterIdentity: id, Owner: "b", Relayed: true, EverSynced: true}},
	}}
	r := NewRelayer(RelayerOptions{Self: "a", In: in, Dial: func(_, addr string) (*grpc.ClientConn, error) {
		return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}})
	r.AddPeer("p", "127.0.0.1:1")
	t.Cleanup(func() { r.RemovePeer("p") })
	r.Changed(id)
	r.mu.Lock()
	owner := r.owners[id]
	r.links["p"].done[id] = ingest.Epoch{At: 7, Replica: "a"} // as a relay that sent epoch 7 in full records it
	r.mu.Unlock()
	if owner != "b" {
		t.Fatalf("owner of a held cluster %q; want b", owner)
	}

	in.mu.Lock()
	delete(in.held, id)
	in.mu.Unlock()
	r.Changed(id)
	r.mu.Lock()
	defer r.mu.Unlock()
	if o, ok := r.owners[id]; ok {
		t.Errorf("a cluster no longer held keeps its owner %q", o)
	}
	if e, ok := r.links["p"].done[id]; ok {
		t.Errorf("a cluster no longer held keeps the epoch %v a peer got", e)
	}
}
