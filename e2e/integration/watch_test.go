package integration

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/hub/watch"
	"github.com/navemesh/nave/internal/testwait"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/spoke/remote"
	"github.com/navemesh/nave/spoke/uplink"
)

// watchHub runs a hub's ingest and Watch servers on loopback, trusting
// the (mesh, cluster) a spoke claims.
func watchHub(t *testing.T, addr string) (*hubIngest, string, func()) {
	t.Helper()
	var w *watch.Server
	in := newHubIngest(ingest.StoreOptions{StaleGracePeriod: time.Minute,
		OnChange: func(m string, _ bool) { w.Notify(m) }}, ingest.ServerOptions{
		Watch: func(id ingest.ClusterIdentity, s protocolv1.Sync_WatchServer) error {
			return w.Serve(id.Mesh, id.Cluster, s)
		}})
	w = watch.New(in, watch.Options{Debounce: 10 * time.Millisecond, Ready: in.Ready})
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	protocolv1.RegisterSyncServer(srv, in.srv)
	go func() { _ = srv.Serve(lis) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			srv.Stop()
		}
	}
	t.Cleanup(stop)
	return in, lis.Addr().String(), stop
}

// runUplink runs an uplink of objs until the test ends, with short
// backoffs unless opts sets its own.
func runUplink(t *testing.T, opts uplink.Options, objs []*meshconfig.Object) *uplink.Uplink {
	t.Helper()
	if opts.BackoffInitial == 0 {
		opts.BackoffInitial, opts.BackoffMax = 20*time.Millisecond, 100*time.Millisecond
	}
	opts.MaxMessageBytes = 1 << 20
	up := uplink.New(opts)
	up.Update(objs)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- up.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return up
}

// The spoke's uplink keeps the rest of its mesh from Watch, on disk; a
// spoke restarted while the hub is gone loads it back.
func TestUplinkKeepsTheRemoteViewOnDisk(t *testing.T) {
	_, addr, stop := watchHub(t, "127.0.0.1:0")
	runUplink(t, uplink.Options{Address: addr, Mesh: "m", Cluster: "c2"}, serviceEntries(t, 5))
	view := remote.New("m", "c1")
	file := filepath.Join(t.TempDir(), remote.File)
	up := runUplink(t, uplink.Options{Address: addr, Mesh: "m", Cluster: "c1", View: view, ViewFile: file}, serviceEntries(t, 2)[:1])
	testwait.For(t, waitFor, func() error {
		if st := up.Status(); st.Watch != uplink.WatchSynced {
			return fmt.Errorf("watch is %s (%s)", st.Watch, st.WatchLastErr)
		}
		cs := view.Clusters()
		if len(cs) != 1 || cs[0].Name != "c2" || len(cs[0].Objects) != 5 {
			return fmt.Errorf("view clusters = %+v", view.Status())
		}
		return nil
	})
	stop()

	loaded := remote.New("m", "c1")
	testwait.For(t, waitFor, func() error { return loaded.Load(file) })
	if cs := loaded.Clusters(); len(cs) != 1 || cs[0].Name != "c2" || len(cs[0].Objects) != 5 || !loaded.Complete() {
		t.Fatalf("loaded view = %+v", loaded.Status())
	}
}
