package replica_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/hub/replica"
	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/meshconfig"
)

// waitFor bounds every wait; generous for a busy machine.
const waitFor = 15 * time.Second

// node is one hub replica's ingest, with its spokes listener and relay
// listener on loopback (plaintext) and its Relayer.
type node struct {
	id      string
	store   *ingest.Store
	in      *ingest.Ownership
	relayer *replica.Relayer
	spokes  string // address of the spokes listener
	relay   string // address of the relay listener
	cancel  context.CancelFunc
	servers []*grpc.Server
	reg     *prometheus.Registry
}

func listen(t testing.TB) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

func newNode(t testing.TB, id string) *node {
	t.Helper()
	return newNodeWith(t, id, ingest.StoreOptions{StaleGracePeriod: time.Hour}, nil)
}

// newNodeWith makes a node whose ingest has opts (its Replicas, an
// ingest.ReplicaFuncs if set, gets its ID and ChangedFunc here) and whose
// Relayer adopts what adopt says.
func newNodeWith(t testing.TB, id string, opts ingest.StoreOptions, adopt func(ingest.Holding) bool) *node {
	t.Helper()
	n := &node{id: id, reg: prometheus.NewRegistry()}
	var rl atomic.Pointer[replica.Relayer]
	rf, _ := opts.Replicas.(ingest.ReplicaFuncs)
	rf.ID = id
	rf.ChangedFunc = func(c ingest.ClusterIdentity) {
		if r := rl.Load(); r != nil {
			r.Changed(c)
		}
	}
	opts.Replicas = rf
	n.store = ingest.NewStore(opts)
	srv := ingest.NewServer(n.store, ingest.ClaimedIdentity(), ingest.ServerOptions{})
	n.in = ingest.NewOwnership(srv)
	m := replica.NewMetrics(n.reg)
	spokes, relay := listen(t), listen(t)
	n.spokes, n.relay = spokes.Addr().String(), relay.Addr().String()
	ss, rs := grpc.NewServer(), grpc.NewServer()
	protocolv1.RegisterSyncServer(ss, srv)
	protocolv1.RegisterSyncServer(rs, replica.NewRelayServer(n.in, true, m, nil))
	go func() { _ = ss.Serve(spokes) }()
	go func() { _ = rs.Serve(relay) }()
	n.servers = []*grpc.Server{ss, rs}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	r := replica.NewRelayer(replica.RelayerOptions{Self: id, In: n.in, Metrics: m, Adopt: adopt,
		Dial: func(_, addr string) (*grpc.ClientConn, error) {
			return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		}})
	r.Start(ctx)
	rl.Store(r)
	n.relayer = r
	t.Cleanup(n.stop)
	return n
}

// stop kills the node: its listeners and relays end at once.
func (n *node) stop() {
	n.cancel()
	for _, s := range n.servers {
		s.Stop()
	}
}

// held returns id as n holds it, without its resources.
func (n *node) held(id ingest.ClusterIdentity) (ingest.Holding, bool) {
	hs := n.in.Holdings(ingest.HoldingFilter{Only: id})
	if len(hs) == 0 {
		return ingest.Holding{}, false
	}
	return hs[0], true
}

// holding returns id as n holds it, with its resources.
func (n *node) holding(id ingest.ClusterIdentity) (ingest.Holding, bool) {
	hs := n.in.Holdings(ingest.HoldingFilter{Only: id, Objects: true})
	if len(hs) == 0 {
		return ingest.Holding{}, false
	}
	return hs[0], true
}

// objects returns the (kind namespace/name → version) of what n holds of
// cluster id; nil when it holds nothing.
func (n *node) objects(id ingest.ClusterIdentity) map[string]string {
	h, ok := n.holding(id)
	if !ok {
		return nil
	}
	out := map[string]string{}
	for _, byName := range h.Objects {
		for name, o := range byName {
			out[o.Kind.Kind+" "+name] = o.Version
		}
	}
	return out
}

// spokeStream is a spoke's Push stream to a node.
type spokeStream struct {
	t      testing.TB
	stream protocolv1.Sync_PushClient
	cancel context.CancelFunc
	nonce  int
}

func dialSpoke(t testing.TB, n *node, id ingest.ClusterIdentity) *spokeStream {
	t.Helper()
	conn, err := grpc.NewClient(n.spokes, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(context.Background(),
		metadata.Pairs(protocol.MetadataMesh, id.Mesh, protocol.MetadataCluster, id.Cluster, protocol.MetadataProtocol, protocol.Version)))
	st, err := protocolv1.NewSyncClient(conn).Push(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &spokeStream{t: t, stream: st, cancel: cancel}
	t.Cleanup(cancel)
	return s
}

// send sends one message and waits for its ACK.
func (s *spokeStream) send(m *discoveryv3.DeltaDiscoveryResponse) {
	s.t.Helper()
	s.nonce++
	m.Nonce = strconv.Itoa(s.nonce)
	if err := s.stream.Send(m); err != nil {
		s.t.Fatal(err)
	}
	r, err := s.stream.Recv()
	if err != nil {
		s.t.Fatal(err)
	}
	if r.GetErrorDetail() != nil {
		s.t.Fatalf("NACK: %v", r.GetErrorDetail().GetMessage())
	}
}

// state sends objs, then the synced marker.
func (s *spokeStream) state(objs []*meshconfig.Object) {
	s.t.Helper()
	byType := map[string][]*discoveryv3.Resource{}
	for _, o := range objs {
		r, err := protocol.Encode(o)
		if err != nil {
			s.t.Fatal(err)
		}
		byType[o.Kind.TypeURL] = append(byType[o.Kind.TypeURL], r)
	}
	for tu, rs := range byType {
		s.send(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: tu, Resources: rs})
	}
	s.send(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: protocol.SyncedTypeURL})
}

func serviceEntries(t testing.TB, names ...string) []*meshconfig.Object {
	t.Helper()
	var out []*meshconfig.Object
	for i, n := range names {
		y := fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: %s, namespace: demo}
spec:
  hosts: [%s.demo.svc.cluster.local]
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  endpoints: [{address: 127.0.0.1, ports: {grpc: %d}}]
`, n, n, 17000+i)
		objs, errs := meshconfig.DecodeYAML([]byte(y), n)
		if len(errs) > 0 {
			t.Fatal(errs[0])
		}
		out = append(out, objs...)
	}
	return out
}

// removalWatch records every object of a cluster that vanishes from a
// node, by polling it.
type removalWatch struct {
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	removed []string
}

func watchRemovals(t testing.TB, n *node, id ingest.ClusterIdentity) *removalWatch {
	w := &removalWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		prev := n.objects(id)
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			cur := n.objects(id)
			w.mu.Lock()
			for k := range prev {
				if _, ok := cur[k]; !ok {
					w.removed = append(w.removed, k)
				}
			}
			w.mu.Unlock()
			prev = cur
		}
	}()
	t.Cleanup(func() { w.end() })
	return w
}

// seen returns what vanished so far.
func (w *removalWatch) seen() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.removed)
}

// end stops the watch and returns what vanished.
func (w *removalWatch) end() []string {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
	return w.removed
}

// fakeIngest is a replica.Ingest at a unit's edge: it lists what holdings
// returns (whatever the filter) and moves with move; it relays and
// withdraws nothing.
type fakeIngest struct {
	holdings func() []ingest.Holding
	move     func(id ingest.ClusterIdentity, epoch ingest.Epoch, reason, redirect string) bool
}

func (f fakeIngest) Holdings(ingest.HoldingFilter) []ingest.Holding {
	if f.holdings == nil {
		return nil
	}
	return f.holdings()
}

func (f fakeIngest) Relay(protocolv1.Sync_PushServer, ingest.ClusterIdentity, string, ingest.Epoch) error {
	return errors.New("fakeIngest relays nothing")
}

func (f fakeIngest) Move(id ingest.ClusterIdentity, epoch ingest.Epoch, reason, redirect string) bool {
	return f.move != nil && f.move(id, epoch, reason, redirect)
}

func (f fakeIngest) WithdrawRelayed(ingest.ClusterIdentity, ingest.Epoch, string) bool { return false }
