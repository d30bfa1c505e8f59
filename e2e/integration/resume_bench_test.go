package integration

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"

	"github.com/navemesh/nave/e2e/load"
	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/internal/testwait"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/spoke/uplink"
)

// wireCounter is a gRPC stats handler that counts the payload bytes a
// server receives and sends (compressed size on the wire, framing aside).
type wireCounter struct{ in, out atomic.Int64 }

func (w *wireCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (w *wireCounter) HandleRPC(_ context.Context, s stats.RPCStats) {
	switch p := s.(type) {
	case *stats.InPayload:
		w.in.Add(int64(p.WireLength))
	case *stats.OutPayload:
		w.out.Add(int64(p.WireLength))
	}
}
func (w *wireCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (w *wireCounter) HandleConn(context.Context, stats.ConnStats)                       {}

// reconnectBench is one spoke's uplink against an ingest server that the
// benchmark takes away and brings back on the same address.
type reconnectBench struct {
	in    *hubIngest
	addr  string
	up    *uplink.Uplink
	wire  wireCounter
	srv   *grpc.Server
	srvMu sync.Mutex
	n     int // sessions so far
}

func (r *reconnectBench) serve(tb testing.TB) {
	tb.Helper()
	lis, err := net.Listen("tcp", r.addr)
	if err != nil {
		tb.Fatal(err)
	}
	srv := grpc.NewServer(grpc.StatsHandler(&r.wire), grpc.MaxRecvMsgSize(16<<20), grpc.MaxSendMsgSize(16<<20))
	protocolv1.RegisterSyncServer(srv, r.in.srv)
	go func() { _ = srv.Serve(lis) }()
	r.srvMu.Lock()
	r.srv = srv
	r.srvMu.Unlock()
	r.addr = lis.Addr().String()
}

func (r *reconnectBench) stop() {
	r.srvMu.Lock()
	defer r.srvMu.Unlock()
	if r.srv != nil {
		r.srv.Stop()
		r.srv = nil
	}
}

// waitSynced waits until the uplink's session n is synced.
func (r *reconnectBench) waitSynced(tb testing.TB, n int) {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Minute) // a hang bound, not a threshold
	for {
		st := r.up.Status()
		if st.Sessions == n && st.State == uplink.StateSynced {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("uplink %s after %d sessions, want synced after %d", st.State, st.Sessions, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// newReconnectBench syncs a spoke of services × endpoints (the load
// workload's one cluster) to a hub.
func newReconnectBench(tb testing.TB, services, endpoints int) *reconnectBench {
	tb.Helper()
	w, err := load.NewWorkload(load.WorkloadOptions{Services: services, EndpointsPerCluster: endpoints, Clusters: []string{"c1"}})
	if err != nil {
		tb.Fatal(err)
	}
	r := &reconnectBench{in: newHubIngest(ingest.StoreOptions{StaleGracePeriod: time.Hour}, ingest.ServerOptions{}), addr: "127.0.0.1:0"}
	r.serve(tb)
	tb.Cleanup(r.stop)
	r.up = uplink.New(uplink.Options{Address: r.addr, Mesh: "m", Cluster: "c1", BackoffInitial: time.Millisecond, BackoffMax: time.Millisecond, MaxMessageBytes: 16 << 20})
	r.up.Update(w.Objects(0))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.up.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		<-done
	})
	r.n = 1
	r.waitSynced(tb, r.n)
	return r
}

// reconnect ends the spoke's stream, gives the hub back (empty if fresh:
// a restart) and waits until the spoke synced again; it returns the bytes
// the hub received and sent on the new stream and the time from the
// hub's return to synced.
func (r *reconnectBench) reconnect(tb testing.TB, fresh bool) (in, out int64, took time.Duration) {
	tb.Helper()
	r.stop()
	testwait.Until(tb, "the uplink saw its stream end", func() bool { return r.up.Synced() != nil })
	if fresh {
		r.in = newHubIngest(ingest.StoreOptions{StaleGracePeriod: time.Hour}, ingest.ServerOptions{})
	}
	in0, out0 := r.wire.in.Load(), r.wire.out.Load()
	start := time.Now()
	r.serve(tb)
	r.n++
	r.waitSynced(tb, r.n)
	return r.wire.in.Load() - in0, r.wire.out.Load() - out0, time.Since(start)
}

// BenchmarkReconnect measures a spoke's reconnect with unchanged state at
// the load benchmark's size, 1,000 services × 15 endpoints (16,000
// resources), against a hub that holds nothing (full: a hub restart, and
// what every reconnect cost before resume) and one that holds the
// cluster (resumed: a blip, a failover or move to a replica that has it).
// ns/op is from the hub's return to the spoke synced (including the
// spoke's reconnect backoff of 1 ms); in-bytes/op is what the hub
// received, out-bytes/op what it sent (ACKs, and the resume hint: a
// digest per type, the state being unchanged).
func BenchmarkReconnect(b *testing.B) {
	for _, mode := range []string{"full", "resumed"} {
		b.Run(mode, func(b *testing.B) { benchReconnect(b, mode == "full", 1000, 15) })
	}
}

func benchReconnect(b *testing.B, fresh bool, services, endpoints int) {
	r := newReconnectBench(b, services, endpoints)
	var in, out int64
	var took time.Duration
	b.ResetTimer()
	for range b.N {
		i, o, d := r.reconnect(b, fresh)
		in, out, took = in+i, out+o, took+d
	}
	b.StopTimer()
	b.ReportMetric(float64(in)/float64(b.N), "in-bytes/op")
	b.ReportMetric(float64(out)/float64(b.N), "out-bytes/op")
	b.ReportMetric(float64(took.Nanoseconds())/float64(b.N), "reconnect-ns/op")
}

// TestBenchmarkReconnect is BenchmarkReconnect's twin: it runs each case
// once at a small size through the same code, and checks what resume is
// for — a resumed reconnect receives a small fraction of the full state.
func TestBenchmarkReconnect(t *testing.T) {
	r := newReconnectBench(t, 20, 3)
	full, fullOut, _ := r.reconnect(t, true)
	resumed, resumedOut, _ := r.reconnect(t, false)
	t.Logf("20 services × 3 endpoints: full reconnect %d bytes in, %d out; resumed %d in, %d out", full, fullOut, resumed, resumedOut)
	if resumed <= 0 || resumed*10 > full {
		t.Errorf("a resumed reconnect received %d bytes, a full one %d: want under 10 %%", resumed, full)
	}
	// Unchanged, every type's digest matches: the hint names no resource.
	if resumedOut*10 > full {
		t.Errorf("a resumed reconnect sent %d bytes back (the hint), the full state is %d: want under 10 %%", resumedOut, full)
	}
}
