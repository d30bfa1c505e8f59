package poll

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
)

// fakeSpoke serves Poll as a polled spoke does, claiming cluster in its
// header (plaintext): it sends the synced marker and records the answers.
type fakeSpoke struct {
	protocolv1.UnimplementedPolledServer
	cluster string
	streams atomic.Int32
	mu      sync.Mutex
	answers []*discoveryv3.DeltaDiscoveryRequest
	ended   chan struct{}
}

func (f *fakeSpoke) Poll(s protocolv1.Polled_PollServer) error {
	f.streams.Add(1)
	defer func() { f.ended <- struct{}{} }()
	md := metadata.Pairs(protocol.MetadataMesh, "default", protocol.MetadataCluster, f.cluster, protocol.MetadataProtocol, protocol.Version)
	if err := s.SendHeader(md); err != nil {
		return err
	}
	if err := s.Send(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: protocol.SyncedTypeURL, Nonce: "1", SystemVersionInfo: protocol.Version}); err != nil {
		return err
	}
	for {
		r, err := s.Recv()
		if err != nil {
			return err
		}
		f.mu.Lock()
		f.answers = append(f.answers, r)
		f.mu.Unlock()
	}
}

func startFake(t *testing.T, cluster string) (*fakeSpoke, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeSpoke{cluster: cluster, ended: make(chan struct{}, 100)}
	srv := grpc.NewServer()
	protocolv1.RegisterPolledServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return f, lis.Addr().String()
}

func targetStatus(p *Poller, cluster string) TargetStatus {
	for _, s := range p.Status() {
		if s.Cluster == cluster {
			return s
		}
	}
	return TargetStatus{}
}

// The hub dials a polled spoke and ingest holds its stream like a pushed
// one (ACKed, synced); a spoke claiming another cluster than configured is
// refused and dialled again with backoff; a stream this hub stops owning
// is closed, and it is not dialled while not owned.
func TestPoller(t *testing.T) {
	good, goodAddr := startFake(t, "a")
	liar, liarAddr := startFake(t, "c")
	store := ingest.NewStore(ingest.StoreOptions{StaleGracePeriod: time.Minute})
	in := ingest.NewServer(store, ingest.ClaimedIdentity(), ingest.ServerOptions{})
	own := ingest.NewOwnership(in)
	var mine, hosted atomic.Bool
	mine.Store(true)
	hosted.Store(true)
	var askedA atomic.Int64      // how often the poller asked whether it owns a
	var askedHosted atomic.Int64 // how often it asked whether the mesh is served
	p := New(in, Options{
		Targets: []Target{{ID: ingest.ClusterIdentity{Mesh: "default", Cluster: "a"}, Address: goodAddr},
			{ID: ingest.ClusterIdentity{Mesh: "default", Cluster: "b"}, Address: liarAddr}},
		BackoffInitial: 20 * time.Millisecond, BackoffMax: 50 * time.Millisecond, Recheck: 20 * time.Millisecond,
		Hosted: func(string) bool { askedHosted.Add(1); return hosted.Load() },
		Mine: func(id ingest.ClusterIdentity) bool {
			if id.Cluster != "a" {
				return true
			}
			askedA.Add(1)
			return mine.Load()
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = p.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	testwait.Until(t, "default/a synced through the poller", func() bool {
		for _, c := range store.Status() {
			if c.Cluster == "a" && c.Connected && c.Synced && c.Polled {
				return true
			}
		}
		return false
	})
	// The hub marks the cluster synced before its ACK reaches the spoke.
	testwait.Until(t, "the spoke got an answer", func() bool {
		good.mu.Lock()
		defer good.mu.Unlock()
		return len(good.answers) > 0
	})
	good.mu.Lock()
	if len(good.answers) != 1 || good.answers[0].GetResponseNonce() != "1" || good.answers[0].GetErrorDetail() != nil {
		t.Errorf("the spoke got %v, want the ACK of nonce 1", good.answers)
	}
	good.mu.Unlock()
	if st := targetStatus(p, "a"); st.State != StateStreaming || st.Streams != 1 {
		t.Errorf("target a: %+v", st)
	}
	// Balancing never moves a polled spoke: which replica dials it is
	// the poller's decision.
	for _, h := range own.Holdings(ingest.HoldingFilter{}) {
		if h.Cluster == "a" && (!h.Polled || own.Move(h.ClusterIdentity, h.Epoch, "balance", "")) {
			t.Errorf("polled holding %+v was moved, or is not marked polled", h)
		}
	}

	testwait.Until(t, "the liar refused a few times", func() bool { return targetStatus(p, "b").Failures >= 3 })
	st := targetStatus(p, "b")
	if st.Streams != 0 || !strings.Contains(st.LastError, "is cluster default/c, but this address is configured for default/b") {
		t.Errorf("target b: %+v", st)
	}
	liar.mu.Lock()
	if len(liar.answers) != 0 {
		t.Errorf("the liar got answers: %v", liar.answers)
	}
	liar.mu.Unlock()
	for _, c := range store.Status() {
		if c.Cluster != "a" {
			t.Errorf("ingest holds %s", c.ClusterIdentity)
		}
	}

	mine.Store(false)
	select {
	case <-good.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream was not closed when the hub stopped owning the spoke")
	}
	testwait.Until(t, "target a not owned", func() bool { return targetStatus(p, "a").State == StateNotOwner })
	// Not dialled while not owned: the poller asks before every attempt,
	// so three more answers "no" are three attempts it did not make.
	n, asked := good.streams.Load(), askedA.Load()
	testwait.Until(t, "the poller asked three more times whether it owns a", func() bool { return askedA.Load() >= asked+3 })
	if good.streams.Load() != n {
		t.Error("the hub dialled a spoke it does not own")
	}
	for _, c := range store.Status() {
		if c.Cluster == "a" && (c.Connected || !c.Stale) {
			t.Errorf("default/a after its stream closed: %+v, want kept as stale", c)
		}
	}
	mine.Store(true)
	testwait.Until(t, "dialled again once owned", func() bool { return good.streams.Load() > n && targetStatus(p, "a").State == StateStreaming })

	// A mesh the hub stops serving (deleted at runtime): its open stream
	// is closed and it is not dialled, until it is served again.
	hosted.Store(false)
	select {
	case <-good.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream was not closed when the hub stopped serving its mesh")
	}
	testwait.Until(t, "target a's mesh not hosted", func() bool { return targetStatus(p, "a").State == StateNotHosted })
	n = good.streams.Load()
	attempts := targetStatus(p, "a").Attempts
	// The poller asks before every attempt: three more answers "no" are
	// attempts it did not make.
	asked = askedHosted.Load()
	testwait.Until(t, "the poller asked three more times whether the mesh is served", func() bool { return askedHosted.Load() >= asked+3 })
	if good.streams.Load() != n || targetStatus(p, "a").Attempts != attempts {
		t.Error("the hub dialled a spoke of a mesh it does not serve")
	}
	hosted.Store(true)
	testwait.Until(t, "dialled again once its mesh is served", func() bool { return good.streams.Load() > n && targetStatus(p, "a").State == StateStreaming })
}
