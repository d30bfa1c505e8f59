package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/hub/poll"
	"github.com/navemesh/nave/internal/metrictest"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/spoke/uplink"
)

// serveIngest serves in on addr until the returned stop is called (or the
// test ends): a hub whose gRPC server goes away while its state stays, as
// when a network blip ends a spoke's stream.
func serveIngest(t *testing.T, in *hubIngest, addr string) (string, func()) {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	protocolv1.RegisterSyncServer(srv, in.srv)
	go func() { _ = srv.Serve(lis) }()
	var once sync.Once
	stop := func() { once.Do(srv.Stop) }
	t.Cleanup(stop)
	return lis.Addr().String(), stop
}

// heldObjects maps "Kind ns/name" to the object the hub serves for c1.
func heldObjects(in *hubIngest) map[string]*meshconfig.Object {
	out := map[string]*meshconfig.Object{}
	for _, c := range in.Clusters("m") {
		for _, o := range c.Objects {
			out[o.Kind.Kind+" "+o.Key()] = o
		}
	}
	return out
}

// sent reads the uplink's counters of what it put on the wire.
type sent struct{ messages, resources, bytes float64 }

func sentBy(t *testing.T, reg prometheus.Gatherer) sent {
	return sent{
		messages:  metrictest.Value(t, reg, "nave_spoke_uplink_messages_total"),
		resources: metrictest.Value(t, reg, "nave_spoke_uplink_resources_total"),
		bytes:     metrictest.Value(t, reg, "nave_spoke_uplink_sent_bytes_total"),
	}
}

// TestUplinkResumesWithUnchangedAndChangedState: the spoke's stream ends
// while the hub keeps the cluster's state (a network blip); it reconnects
// and resumes. Unchanged, it sends no resource at all — only Resume and
// the synced marker — and the hub's objects stay the very same. Changed
// while disconnected (one added, one modified, one deleted), it sends
// exactly those three, and the hub applies them, the deletion included,
// and nothing else.
func TestUplinkResumesWithUnchangedAndChangedState(t *testing.T) {
	hreg := prometheus.NewRegistry()
	in := newHubIngest(ingest.StoreOptions{StaleGracePeriod: time.Minute, Registerer: hreg}, ingest.ServerOptions{Registerer: hreg})
	addr, stop := serveIngest(t, in, "127.0.0.1:0")
	reg := prometheus.NewRegistry()
	objs := serviceEntries(t, 300)
	up := runUplink(t, uplink.Options{Address: addr, Mesh: "m", Cluster: "c1", Registerer: reg}, objs)
	synced := func(sessions int) func() error {
		return func() error {
			if st := up.Status(); st.Sessions != sessions {
				return fmt.Errorf("sessions = %d, want %d", st.Sessions, sessions)
			}
			if s := in.Status(); len(s) != 1 || !s[0].Synced {
				return fmt.Errorf("hub status %+v", s)
			}
			return up.Synced()
		}
	}
	testwait.For(t, waitFor, synced(1))
	full := sentBy(t, reg)
	if full.resources != 300 || up.Status().Resumed {
		t.Fatalf("first stream sent %v resources (resumed %v), want the full 300 (the hub held nothing)", full.resources, up.Status().Resumed)
	}
	before := heldObjects(in)

	// A blip: the stream ends, the hub keeps the state, the spoke is back.
	stop()
	testwait.For(t, waitFor, func() error {
		if up.Synced() == nil {
			return errors.New("still synced")
		}
		return nil
	})
	_, stop = serveIngest(t, in, addr)
	testwait.For(t, waitFor, synced(2))
	again := sentBy(t, reg)
	if n := again.resources - full.resources; n != 0 {
		t.Errorf("an unchanged reconnect sent %v resources, want 0", n)
	}
	if n := again.messages - full.messages; n != 2 {
		t.Errorf("an unchanged reconnect sent %v messages, want 2 (Resume, Synced)", n)
	}
	if b := again.bytes - full.bytes; b > full.bytes/10 {
		t.Errorf("an unchanged reconnect sent %v bytes, the full state was %v", b, full.bytes)
	}
	if !up.Status().Resumed {
		t.Error("uplink status does not say resumed")
	}
	if after := heldObjects(in); !maps.Equal(after, before) {
		t.Error("the hub's objects changed across an unchanged reconnect")
	}
	t.Logf("full state %v bytes in %v messages; unchanged reconnect %v bytes in %v messages",
		full.bytes, full.messages, again.bytes-full.bytes, again.messages-full.messages)

	// Changes while disconnected: svc-0 deleted, svc-1 modified, svc-300 added.
	stop()
	testwait.For(t, waitFor, func() error {
		if up.Synced() == nil {
			return errors.New("still synced")
		}
		return nil
	})
	more := serviceEntries(t, 301)
	changed := append([]*meshconfig.Object{}, more[2:]...)
	mod := serviceEntries(t, 2)[1]
	mod.Labels = map[string]string{"changed": "yes"}
	mod.Version = mod.ComputeVersion()
	changed = append(changed, mod)
	up.Update(changed)
	_, _ = serveIngest(t, in, addr)
	testwait.For(t, waitFor, synced(3))
	last := sentBy(t, reg)
	if n := last.resources - again.resources; n != 3 {
		t.Errorf("a reconnect after three changes sent %v resources, want 3", n)
	}
	after := heldObjects(in)
	if len(after) != 300 {
		t.Errorf("hub holds %d objects, want 300", len(after))
	}
	if _, ok := after["ServiceEntry ns/svc-0"]; ok {
		t.Error("the deletion made while disconnected was not applied")
	}
	if after["ServiceEntry ns/svc-1"].Version != mod.Version {
		t.Error("the modification made while disconnected was not applied")
	}
	if _, ok := after["ServiceEntry ns/svc-300"]; !ok {
		t.Error("the addition made while disconnected was not applied")
	}
	for i := 2; i < 300; i++ {
		r := fmt.Sprintf("ServiceEntry ns/svc-%d", i)
		if after[r] != before[r] {
			t.Fatalf("%s changed, though the spoke did not change it", r)
		}
	}
	if n := metrictest.Value(t, hreg, "nave_hub_ingest_resume_requests_total", "result", "resumed"); n != 2 {
		t.Errorf("hub counted %v resumed streams, want 2", n)
	}
	if n := metrictest.Value(t, reg, "nave_spoke_uplink_resumes_total", "result", "full"); n != 1 {
		t.Errorf("spoke counted %v full-state answers, want 1 (the first stream)", n)
	}
}

// olderHub is a hub from before Resume, reduced to what matters here: it
// NACKs a message of a type it does not know (as ingest did), ACKs the
// rest, and counts the resources it was sent.
type olderHub struct {
	protocolv1.UnimplementedSyncServer
	mu        sync.Mutex
	resources int
	synced    bool
}

func (h *olderHub) Push(stream protocolv1.Sync_PushServer) error {
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		reply := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: m.GetTypeUrl(), ResponseNonce: m.GetNonce()}
		_, known := meshconfig.KindByTypeURL(m.GetTypeUrl())
		switch {
		case m.GetTypeUrl() == protocol.SyncedTypeURL:
			h.mu.Lock()
			h.synced = true
			h.mu.Unlock()
		case !known:
			reply.ErrorDetail = &statuspb.Status{Code: 3, Message: fmt.Sprintf("unknown type URL %q", m.GetTypeUrl())}
		default:
			h.mu.Lock()
			h.resources += len(m.GetResources())
			h.mu.Unlock()
		}
		if err := stream.Send(reply); err != nil {
			return err
		}
	}
}

// TestUplinkSendsTheFullStateToAnOlderHub: a hub that does not know
// Resume NACKs it; the spoke then sends its full state, as before.
func TestUplinkSendsTheFullStateToAnOlderHub(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &olderHub{}
	srv := grpc.NewServer()
	protocolv1.RegisterSyncServer(srv, h)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	reg := prometheus.NewRegistry()
	up := runUplink(t, uplink.Options{Address: lis.Addr().String(), Mesh: "m", Cluster: "c1", Registerer: reg}, serviceEntries(t, 20))
	testwait.For(t, waitFor, up.Synced)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.resources != 20 || !h.synced {
		t.Errorf("older hub got %d resources (synced %v), want the full 20", h.resources, h.synced)
	}
	if st := up.Status(); st.Resumed || len(st.Nacked) != 0 {
		t.Errorf("status %+v: want not resumed, nothing NACKed", st)
	}
	if n := metrictest.Value(t, reg, "nave_spoke_uplink_resumes_total", "result", "full"); n != 1 {
		t.Errorf("full-state answers = %v, want 1", n)
	}
}

type pollServer struct {
	protocolv1.UnimplementedPolledServer
	u *uplink.Uplink
}

func (s pollServer) Poll(st protocolv1.Polled_PollServer) error { return s.u.Poll(st) }

// TestPolledSpokeResumes: polled mode gets resume from the same code (the
// spoke's run, ingest's serve): the hub's poller stops owning the spoke
// (its stream closes, ingest keeps the state) and owns it again; the new
// stream resumes and the spoke sends no resource.
func TestPolledSpokeResumes(t *testing.T) {
	reg := prometheus.NewRegistry()
	up := uplink.New(uplink.Options{Polled: true, Address: "127.0.0.1:0", Mesh: "m", Cluster: "c1", MaxMessageBytes: 1 << 20, Registerer: reg})
	up.Update(serviceEntries(t, 50))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	protocolv1.RegisterPolledServer(srv, pollServer{u: up})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	in := newHubIngest(ingest.StoreOptions{StaleGracePeriod: time.Minute}, ingest.ServerOptions{})
	var mine sync.Mutex
	owned := true
	p := poll.New(in.srv, poll.Options{
		Targets:        []poll.Target{{ID: ingest.ClusterIdentity{Mesh: "m", Cluster: "c1"}, Address: lis.Addr().String()}},
		BackoffInitial: 20 * time.Millisecond, BackoffMax: 50 * time.Millisecond, Recheck: 20 * time.Millisecond,
		Mine: func(ingest.ClusterIdentity) bool { mine.Lock(); defer mine.Unlock(); return owned },
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = p.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	synced := func(sessions int) func() error {
		return func() error {
			if st := up.Status(); st.Sessions != sessions || st.State != uplink.StateSynced {
				return fmt.Errorf("uplink %s after %d sessions, want synced after %d", st.State, st.Sessions, sessions)
			}
			return nil
		}
	}
	testwait.For(t, waitFor, synced(1))
	full := sentBy(t, reg)
	before := heldObjects(in)

	mine.Lock()
	owned = false
	mine.Unlock()
	testwait.For(t, waitFor, func() error {
		if s := in.Status(); len(s) != 1 || s[0].Connected {
			return fmt.Errorf("hub status %+v, want c1 disconnected", s)
		}
		return nil
	})
	mine.Lock()
	owned = true
	mine.Unlock()
	testwait.For(t, waitFor, synced(2))
	again := sentBy(t, reg)
	if n := again.resources - full.resources; n != 0 {
		t.Errorf("a polled reconnect with unchanged state sent %v resources, want 0", n)
	}
	if !up.Status().Resumed {
		t.Error("the polled stream did not resume")
	}
	if after := heldObjects(in); !maps.Equal(after, before) || len(after) != 50 {
		t.Errorf("the hub's objects changed across a polled resume (%d held)", len(after))
	}
}
