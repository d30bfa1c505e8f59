package replica_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/hub/replica"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/meshconfig"
)

func connect(nodes ...*node) {
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b {
				a.relayer.AddPeer(b.id, b.relay)
			}
		}
	}
}

// holds waits until n holds id with exactly want, from owner at an epoch
// that is not before min.
func holds(t *testing.T, n *node, id ingest.ClusterIdentity, want map[string]string, owner string) ingest.Holding {
	t.Helper()
	var h ingest.Holding
	testwait.For(t, waitFor, func() error {
		var ok bool
		h, ok = n.held(id)
		if !ok {
			return fmt.Errorf("%s holds no %s", n.id, id)
		}
		if h.Owner != owner || !h.Synced {
			return fmt.Errorf("%s holds %s from %s (synced %v), want from %s, synced", n.id, id, h.Owner, h.Synced, owner)
		}
		if got := n.objects(id); !maps.Equal(got, want) {
			return fmt.Errorf("%s holds %v of %s, want %v", n.id, got, id, want)
		}
		return nil
	})
	return h
}

// TestRelayFailoverDeletesNothing: a spoke's state reaches every peer of
// its owner; when the owner dies the peers keep it (stale), and when the
// spoke re-homes to a peer with the same state nothing is removed
// anywhere; a late relay of the old owner's epoch is refused; a removal the
// spoke makes does reach every replica.
func TestRelayFailoverDeletesNothing(t *testing.T) {
	a, b, c := newNode(t, "a"), newNode(t, "b"), newNode(t, "c")
	connect(a, b, c)
	x := ingest.ClusterIdentity{Mesh: "default", Cluster: "x"}
	objs := serviceEntries(t, "alpha", "beta")

	sa := dialSpoke(t, a, x)
	sa.state(objs)
	want := a.objects(x)
	if len(want) != 2 {
		t.Fatalf("owner holds %v", want)
	}
	holds(t, b, x, want, "a")
	oldEpoch := holds(t, c, x, want, "a").Epoch
	wb, wc := watchRemovals(t, b, x), watchRemovals(t, c, x)

	// The owner dies: the peers keep the cluster, stale.
	a.stop()
	for _, n := range []*node{b, c} {
		testwait.For(t, waitFor, func() error {
			if h, _ := n.held(x); h.Connected {
				return fmt.Errorf("%s still shows the dead owner's relay connected", n.id)
			}
			return nil
		})
	}

	// The spoke re-homes to b with the same state.
	sb := dialSpoke(t, b, x)
	sb.state(objs)
	h := holds(t, c, x, want, "b")
	if !oldEpoch.Before(h.Epoch) {
		t.Errorf("epoch after failover %s is not after %s", h.Epoch, oldEpoch)
	}
	if got := append(wb.end(), wc.end()...); len(got) > 0 {
		t.Errorf("the failover removed %v, which the spoke still has", got)
	}

	// A late relay of a's epoch is refused by c.
	conn, err := grpc.NewClient(c.relay, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	md := metadata.Pairs(protocol.MetadataMesh, x.Mesh, protocol.MetadataCluster, x.Cluster, protocol.MetadataProtocol, protocol.Version,
		replica.MetadataOwner, "a", replica.MetadataEpoch, oldEpoch.String(), replica.MetadataReplica, "a")
	st, err := protocolv1.NewSyncClient(conn).Push(metadata.NewOutgoingContext(context.Background(), md))
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Send(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: protocol.SyncedTypeURL, Nonce: "1"})
	if _, err := st.Recv(); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("late relay of epoch %s: got %v, want FailedPrecondition", oldEpoch, err)
	}
	holds(t, c, x, want, "b")

	// What the spoke deletes is deleted everywhere.
	sb.send(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: objs[0].Kind.TypeURL, RemovedResources: []string{objs[0].Key()}})
	left := b.objects(x)
	if len(left) != 1 {
		t.Fatalf("b holds %v after the spoke removed %s", left, objs[0].Key())
	}
	holds(t, c, x, left, "b")
}

// TestNewPeerGetsStaleClusters: a replica that joins after a spoke left
// its owner still gets the cluster's state (stale), never an empty view.
func TestNewPeerGetsStaleClusters(t *testing.T) {
	a := newNode(t, "a")
	x := ingest.ClusterIdentity{Mesh: "default", Cluster: "x"}
	s := dialSpoke(t, a, x)
	s.state(serviceEntries(t, "alpha"))
	want := a.objects(x)
	s.cancel()
	testwait.For(t, waitFor, func() error {
		if h, _ := a.held(x); h.Connected {
			return fmt.Errorf("spoke still connected")
		}
		return nil
	})
	b := newNode(t, "b")
	connect(a, b)
	holds(t, b, x, want, "a")
	testwait.For(t, waitFor, func() error { // the relay of a stale cluster ends once sent
		if h, _ := b.held(x); h.Connected {
			return fmt.Errorf("b shows the cluster connected though its spoke is gone")
		}
		return nil
	})
	if got := b.objects(x); !maps.Equal(got, want) {
		t.Errorf("b holds %v once the relay ended, want %v", got, want)
	}
}

// TestPeerRelaysOrphanedClusters: when a cluster's owner is gone and its
// spoke has not come back, a replica that adopts it relays its stale state
// to a replica that joins later.
func TestPeerRelaysOrphanedClusters(t *testing.T) {
	a := newNode(t, "a")
	b := newNodeWith(t, "b", ingest.StoreOptions{StaleGracePeriod: time.Hour}, func(h ingest.Holding) bool { return h.Owner == "a" })
	connect(a, b)
	x := ingest.ClusterIdentity{Mesh: "default", Cluster: "x"}
	dialSpoke(t, a, x).state(serviceEntries(t, "alpha", "beta"))
	want := a.objects(x)
	h := holds(t, b, x, want, "a")
	a.stop()
	testwait.For(t, waitFor, func() error {
		if h, _ := b.held(x); h.Connected {
			return fmt.Errorf("b still shows a's relay connected")
		}
		return nil
	})
	d := newNode(t, "d")
	connect(b, d)
	holds(t, d, x, want, "a")
	testwait.For(t, waitFor, func() error { // the relay of a stale cluster ends once sent
		if got, _ := d.held(x); got.Epoch != h.Epoch || got.Connected {
			return fmt.Errorf("d holds x at %s connected=%v, want a's epoch %s, stale", got.Epoch, got.Connected, h.Epoch)
		}
		return nil
	})
}

// TestWithdrawalIsTheOwnersAndReachesPeers: a peer never withdraws a
// relayed cluster on its own timer while MayWithdraw says no (its owner
// lives, or it has no quorum); the owner withdraws after its grace period
// and the peer applies it, unless it holds a newer epoch.
func TestWithdrawalIsTheOwnersAndReachesPeers(t *testing.T) {
	var b *node
	x := ingest.ClusterIdentity{Mesh: "default", Cluster: "x"}
	a := newNodeWith(t, "a", ingest.StoreOptions{StaleGracePeriod: 300 * time.Millisecond,
		Replicas: ingest.ReplicaFuncs{WithdrawnFunc: func(id ingest.ClusterIdentity, epoch ingest.Epoch) {
			b.in.WithdrawRelayed(id, epoch, "withdrawn by a")
		}}}, nil)
	asked := make(chan string, 100)
	b = newNodeWith(t, "b", ingest.StoreOptions{StaleGracePeriod: 300 * time.Millisecond, RecheckWithdrawal: 50 * time.Millisecond,
		Replicas: ingest.ReplicaFuncs{MayWithdrawFunc: func(id ingest.ClusterIdentity, owner string) bool {
			select {
			case asked <- owner:
			default:
			}
			return false
		}}}, nil)
	connect(a, b)
	s := dialSpoke(t, a, x)
	s.state(serviceEntries(t, "alpha"))
	holds(t, b, x, a.objects(x), "a")

	// The spoke leaves: b's grace period ends too, but b may not withdraw
	// (asked, it is told no); a, the owner, withdraws and tells b.
	s.cancel()
	testwait.For(t, waitFor, func() error {
		if _, ok := a.held(x); ok {
			return fmt.Errorf("a has not withdrawn x after its grace period")
		}
		if _, ok := b.held(x); ok {
			return fmt.Errorf("b still holds x after a withdrew it")
		}
		return nil
	})
	select {
	case owner := <-asked:
		if owner != "a" {
			t.Errorf("b was asked about owner %q, want a", owner)
		}
	default:
		// a withdrew before b's own grace ended: fine, b never decided alone.
	}
	st := b.store.Status()
	if len(st) != 1 || st[0].Withdrawn == nil || !strings.Contains(st[0].Withdrawn.Reason, "withdrawn by a") {
		t.Errorf("b's status %+v, want x withdrawn by a", st)
	}

	// A peer holding a newer epoch ignores an older withdrawal.
	y := ingest.ClusterIdentity{Mesh: "default", Cluster: "y"}
	dialSpoke(t, b, y).state(serviceEntries(t, "gamma"))
	if b.in.WithdrawRelayed(y, ingest.Epoch{At: 1, Replica: "a"}, "late") {
		t.Error("b withdrew a connected cluster on an old withdrawal")
	}
}

// TestRelayCarriesEachChange: after the full state, the relay sends a
// peer only what changed (Holding.Changes): updates, removals, a type
// whose last object was removed; and after a batch of changes longer
// than the owner's log of changes, the full state again. The peer holds
// exactly what the owner holds after each.
func TestRelayCarriesEachChange(t *testing.T) {
	p := newRelayPair(t)
	x := ingest.ClusterIdentity{Mesh: "default", Cluster: "x"}
	dr, errs := meshconfig.DecodeYAML([]byte("apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: dr, namespace: load}\nspec: {host: svc-0.load.svc.cluster.local}\n"), "dr")
	if len(errs) > 0 {
		t.Fatal(errs[0])
	}
	s := dialSpoke(t, p.a, x)
	s.state(append(services(t, 30, 1, 0), dr...))
	same := func(what string) {
		t.Helper()
		want := p.a.objects(x)
		testwait.For(t, waitFor, func() error {
			if got := p.b.objects(x); !maps.Equal(got, want) {
				return fmt.Errorf("after %s the peer holds %d objects, the owner %d (or other versions)", what, len(got), len(want))
			}
			return nil
		})
	}
	same("the full state")
	send := func(objs []*meshconfig.Object, removed ...*meshconfig.Object) {
		t.Helper()
		byType := map[string]*discoveryv3.DeltaDiscoveryResponse{}
		msg := func(typeURL string) *discoveryv3.DeltaDiscoveryResponse {
			if byType[typeURL] == nil {
				byType[typeURL] = &discoveryv3.DeltaDiscoveryResponse{TypeUrl: typeURL}
			}
			return byType[typeURL]
		}
		for _, o := range objs {
			r, err := protocol.Encode(o)
			if err != nil {
				t.Fatal(err)
			}
			msg(o.Kind.TypeURL).Resources = append(msg(o.Kind.TypeURL).Resources, r)
		}
		for _, o := range removed {
			msg(o.Kind.TypeURL).RemovedResources = append(msg(o.Kind.TypeURL).RemovedResources, o.Key())
		}
		for _, m := range byType {
			s.send(m)
		}
	}
	send(services(t, 3, 1, 1))
	same("3 updates")
	gone := services(t, 5, 1, 0)[3:]
	send(nil, append(gone, dr...)...)
	same("removals, the DestinationRule's the last of its type")
	send(services(t, 1500, 1, 2))
	same("1,500 changes at once")
	send(services(t, 2, 1, 3), services(t, 1500, 1, 2)[1400:]...)
	same("changes after the full state again")
}

// pushRecorder is a peer's relay server at a unit's edge: it reports the
// cluster of each Push stream opened to it and holds the stream open.
type pushRecorder struct {
	protocolv1.UnimplementedSyncServer
	opened chan string
}

func (p *pushRecorder) Push(s protocolv1.Sync_PushServer) error {
	md, _ := metadata.FromIncomingContext(s.Context())
	p.opened <- strings.Join(md.Get(protocol.MetadataCluster), ",")
	<-s.Context().Done()
	return nil
}

// TestRelayStartsAgainWhenItsClusterIsRelayedAgainAsItEnds: a relay ends
// once its cluster is no longer this replica's to relay; if the cluster
// becomes this replica's again while it ends — the Changed that said so
// found the ending relay still registered, and only woke it — a new relay
// starts at once, not at a later sweep (none runs here: the Relayer is
// not started).
func TestRelayStartsAgainWhenItsClusterIsRelayedAgainAsItEnds(t *testing.T) {
	id := ingest.ClusterIdentity{Mesh: "m", Cluster: "x"}
	// Owned here, not synced yet: the relay waits for a change.
	waiting := ingest.Holding{State: ingest.State{ClusterIdentity: id, Owner: "a", Connected: true}}
	// Owned by replica b, relayed here by b: not this replica's to relay.
	elsewhere := waiting
	elsewhere.Owner, elsewhere.Relayed = "b", true
	// Owned here again, synced: the relay streams to the peer.
	back := waiting
	back.EverSynced, back.Synced = true, true

	var (
		mu      sync.Mutex
		cur     = waiting
		skip    = -1 // calls to let through before pausing one; -1: none paused
		entered = make(chan struct{})
		release = make(chan struct{})
	)
	in := fakeIngest{holdings: func() []ingest.Holding {
		mu.Lock()
		h := cur
		pause := skip == 0
		if skip >= 0 {
			skip--
		}
		mu.Unlock()
		if pause {
			// The relay's look at its cluster, answered with the state
			// read before it paused.
			entered <- struct{}{}
			<-release
		}
		return []ingest.Holding{h}
	}}
	peer := &pushRecorder{opened: make(chan string, 4)}
	lis := listen(t)
	gs := grpc.NewServer()
	protocolv1.RegisterSyncServer(gs, peer)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)

	r := replica.NewRelayer(replica.RelayerOptions{Self: "a", In: in,
		Dial: func(_, addr string) (*grpc.ClientConn, error) {
			return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		}})
	r.AddPeer("p", lis.Addr().String())
	t.Cleanup(func() { r.RemovePeer("p") })
	testwait.Until(t, "a relay of x waiting for its synced state", func() bool {
		st := r.Status()
		return len(st) == 1 && st[0].Cluster == id && strings.HasPrefix(st[0].State, "waiting")
	})

	// The cluster moves to b: Changed (let through) wakes the relay, whose
	// look pauses, having read that x is b's.
	mu.Lock()
	cur, skip = elsewhere, 1
	mu.Unlock()
	r.Changed(id)
	<-entered
	// The cluster is back here, synced, while the relay ends.
	mu.Lock()
	cur = back
	mu.Unlock()
	r.Changed(id)
	close(release)

	select {
	case got := <-peer.opened:
		if got != "x" {
			t.Fatalf("relay stream opened for cluster %q, want x", got)
		}
	case <-time.After(testwait.Timeout):
		t.Fatalf("x, relayed here again, was not relayed to the peer; relays: %+v", r.Status())
	}
}

// TestAddPeerAfterStopClosesItsConnection: a peer added once the Relayer
// has stopped (membership calls AddPeer on its own goroutine) is not
// relayed to, and its connection is closed rather than left open.
func TestAddPeerAfterStopClosesItsConnection(t *testing.T) {
	dialed := make(chan *grpc.ClientConn, 2)
	r := replica.NewRelayer(replica.RelayerOptions{Self: "a", In: fakeIngest{},
		Dial: func(_, addr string) (*grpc.ClientConn, error) {
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			dialed <- conn
			return conn, err
		}})
	ctx, cancel := context.WithCancel(context.Background())
	r.Start(ctx)
	r.AddPeer("p", "127.0.0.1:1")
	first := <-dialed
	cancel()
	testwait.Until(t, "the peer's connection closed as the Relayer stopped", func() bool { return first.GetState() == connectivity.Shutdown })
	r.AddPeer("q", "127.0.0.1:2")
	late := <-dialed
	testwait.Until(t, "the late peer's connection closed", func() bool { return late.GetState() == connectivity.Shutdown })
	if st := r.Status(); len(st) != 0 {
		t.Errorf("relays after the stop: %+v", st)
	}
}
