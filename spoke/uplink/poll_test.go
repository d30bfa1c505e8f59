package uplink

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
)

type polledServer struct {
	protocolv1.UnimplementedPolledServer
	u *Uplink
}

func (s polledServer) Poll(st protocolv1.Polled_PollServer) error { return s.u.Poll(st) }

func (s polledServer) PollWatch(st protocolv1.Polled_PollWatchServer) error { return s.u.PollWatch(st) }

// hubPoll opens a Poll stream as the hub does, checks the spoke's header
// and ACKs its full state up to the synced marker.
func hubPoll(t *testing.T, ctx context.Context, conn *grpc.ClientConn) protocolv1.Polled_PollClient {
	t.Helper()
	st, err := protocolv1.NewPolledClient(conn).Poll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h, err := st.Header()
	if err != nil {
		t.Fatal(err)
	}
	if got := h.Get(protocol.MetadataCluster); len(got) != 1 || got[0] != "c1" {
		t.Errorf("header names cluster %v, want c1", got)
	}
	if got := h.Get(protocol.MetadataProtocol); len(got) != 1 || got[0] != protocol.Version {
		t.Errorf("header names protocol %v", got)
	}
	for {
		m, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: m.GetTypeUrl(), ResponseNonce: m.GetNonce()}); err != nil {
			t.Fatal(err)
		}
		if m.GetTypeUrl() == protocol.SyncedTypeURL {
			return st
		}
	}
}

// waitState waits until the uplink is in state want and returns its status.
func waitState(t *testing.T, u *Uplink, want string) Status {
	t.Helper()
	var st Status
	testwait.For(t, testwait.Timeout, func() error {
		if st = u.Status(); st.State != want {
			return fmt.Errorf("uplink state %s, want %s", st.State, want)
		}
		return nil
	})
	return st
}

// A polled uplink serves the hub's Poll stream as it would push: header,
// full state, synced marker; a newer stream supersedes the older (Aborted),
// and EndPoll ends the current one. OnSynced runs each time a stream
// reaches synced, before the state says so.
func TestPoll(t *testing.T) {
	var syncs atomic.Int32
	u := New(Options{Polled: true, Address: "127.0.0.1:0", Mesh: "default", Cluster: "c1", MaxMessageBytes: 1 << 20,
		OnSynced: func() { syncs.Add(1) }})
	if st := u.Status(); st.Mode != "polled" || st.State != StateWaitingHub {
		t.Fatalf("before any stream: %+v", st)
	}
	u.Update(nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	protocolv1.RegisterPolledServer(srv, polledServer{u: u})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	first := hubPoll(t, ctx, conn)
	st := waitState(t, u, StateSynced)
	if st.PolledBy == "" || st.PolledSince == nil || st.Sessions != 1 {
		t.Errorf("polled: %+v", st)
	}
	if n := syncs.Load(); n != 1 {
		t.Errorf("OnSynced ran %d times once synced, want 1", n)
	}
	// Without a remote view (fallback off) there is nothing to watch.
	w, err := protocolv1.NewPolledClient(conn).PollWatch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); status.Code(err) != codes.Unimplemented {
		t.Errorf("PollWatch without a view: %v, want Unimplemented", err)
	}
	second := hubPoll(t, ctx, conn)
	if _, err := first.Recv(); status.Code(err) != codes.Aborted {
		t.Errorf("the first stream ended with %v, want Aborted (superseded)", err)
	}
	if st := waitState(t, u, StateSynced); st.Sessions != 2 {
		t.Errorf("after the second stream: %+v", st)
	}
	if n := syncs.Load(); n != 2 {
		t.Errorf("OnSynced ran %d times after the second stream synced, want 2", n)
	}
	u.EndPoll()
	if _, err := second.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("the second stream ended with %v, want Unavailable (the spoke stops)", err)
	}
	waitState(t, u, StateWaitingHub)
}
