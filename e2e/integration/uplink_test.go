package integration

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/internal/metrictest"
	"github.com/navemesh/nave/internal/testwait"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/spoke/uplink"
)

// hubServer runs a real hub ingest server on loopback, trusting the
// (mesh, cluster) a spoke claims.
func hubServer(t *testing.T, addr string) (*hubIngest, string, func()) {
	t.Helper()
	in := newHubIngest(ingest.StoreOptions{StaleGracePeriod: time.Minute}, ingest.ServerOptions{})
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

func serviceEntries(t *testing.T, n int) []*meshconfig.Object {
	t.Helper()
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: svc-%d, namespace: ns}
spec:
  hosts: [svc-%d.example.com]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.%d.%d}]
`, i, i, i/250, i%250)
	}
	objs, errs := meshconfig.DecodeYAML([]byte(b.String()), "test.yaml")
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return objs
}

func objectCount(in *hubIngest) int {
	n := 0
	for _, c := range in.Clusters("m") {
		n += len(c.Objects)
	}
	return n
}

func TestUplinkSyncsChunksNacksAndResyncs(t *testing.T) {
	in, addr, stop := hubServer(t, "127.0.0.1:0")
	up := uplink.New(uplink.Options{Address: addr, Mesh: "m", Cluster: "c1", BackoffInitial: 20 * time.Millisecond,
		BackoffMax: 100 * time.Millisecond, MaxMessageBytes: 16 * 1024})
	objs := serviceEntries(t, 300) // ~30 KB: several messages under the 8 KB budget

	// An object that the hub refuses (weights sum to 60), built without the
	// spoke's own validation.
	bad := &meshconfig.Object{Name: "bad", Namespace: "ns", Spec: &networking.VirtualService{
		Hosts: []string{"svc-1.example.com"},
		Http: []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{
			{Destination: &networking.Destination{Host: "svc-1.example.com"}, Weight: 30},
			{Destination: &networking.Destination{Host: "svc-2.example.com"}, Weight: 30}}}}}}
	bad.Kind, _ = meshconfig.KindFor("networking.istio.io/v1", "VirtualService")
	bad.Version = bad.ComputeVersion()
	up.Update(append(objs, bad))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- up.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	testwait.For(t, waitFor, func() error {
		if err := up.Synced(); err != nil {
			return err
		}
		if n := objectCount(in); n != 300 {
			return fmt.Errorf("hub holds %d objects", n)
		}
		st := up.Status()
		if len(st.Nacked) != 1 || st.Nacked[0].Name != "ns/bad" || !strings.Contains(st.Nacked[0].Reason, "100") {
			return fmt.Errorf("nacked = %+v", st.Nacked)
		}
		return nil
	})
	if s := in.Status(); len(s) != 1 || s[0].Acks < 4 {
		t.Fatalf("hub status = %+v, want several ACKed messages", s)
	}

	// A removal travels as a delta.
	up.Update(objs[:200])
	testwait.For(t, waitFor, func() error {
		if n := objectCount(in); n != 200 {
			return fmt.Errorf("hub holds %d objects, want 200", n)
		}
		if st := up.Status(); len(st.Nacked) != 0 {
			return fmt.Errorf("nacked after removal = %+v", st.Nacked)
		}
		return nil
	})

	// The hub goes away and comes back empty on the same address: the
	// uplink reconnects by itself and sends its full state again.
	stop()
	testwait.For(t, waitFor, func() error {
		if up.Synced() == nil {
			return fmt.Errorf("still synced")
		}
		return nil
	})
	in2, _, _ := hubServer(t, addr)
	testwait.For(t, waitFor, func() error {
		if err := up.Synced(); err != nil {
			return err
		}
		if n := objectCount(in2); n != 200 {
			return fmt.Errorf("new hub holds %d objects", n)
		}
		return nil
	})
	if up.Status().Sessions < 2 {
		t.Fatalf("sessions = %d", up.Status().Sessions)
	}
}

// TestUplinkFindsAHubThatCameBack starts the uplink while nothing listens
// at the hub's address, lets it fail a few times, then starts the hub
// there: the attempt under way may still fail, the next one must reach the
// hub. (gRPC caches a failed connection and retries it on a backoff of its
// own, from 1 s up to 2 min; an attempt must not fail on that stale error.)
func TestUplinkFindsAHubThatCameBack(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	reg := prometheus.NewRegistry()
	up := uplink.New(uplink.Options{Address: addr, Mesh: "m", Cluster: "c1", BackoffInitial: 10 * time.Millisecond,
		BackoffMax: 20 * time.Millisecond, MaxMessageBytes: 1 << 20, Registerer: reg})
	up.Update(serviceEntries(t, 3))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- up.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	failures := func() int { return int(metrictest.Value(t, reg, "nave_spoke_uplink_reconnects_total")) }
	testwait.For(t, waitFor, func() error {
		if n := failures(); n < 3 {
			return fmt.Errorf("%d failed attempts so far", n)
		}
		return nil
	})

	in, _, _ := hubServer(t, addr) // listening once it returns
	before := failures()
	testwait.For(t, waitFor, func() error {
		if n := objectCount(in); n != 3 {
			return fmt.Errorf("hub holds %d objects", n)
		}
		return up.Synced()
	})
	if extra := failures() - before; extra > 1 {
		t.Fatalf("%d attempts failed after the hub was listening (last error %q), want at most the one under way", extra, up.Status().LastErr)
	}
}

// TestUplinkWaitsForTheSource: an uplink started before its source's
// first state waits for it, then syncs that state with a real hub. (That
// no stream opens before, where an early empty full state would make the
// hub prune the cluster at the synced marker, spoke/uplink's
// TestRunWaitsForTheSource proves on synctest's clock: no window of real
// time could.)
func TestUplinkWaitsForTheSource(t *testing.T) {
	in, addr, _ := hubServer(t, "127.0.0.1:0")
	up := uplink.New(uplink.Options{Address: addr, Mesh: "m", Cluster: "c1", BackoffInitial: 20 * time.Millisecond,
		BackoffMax: 100 * time.Millisecond, MaxMessageBytes: 1 << 20})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- up.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	if s := in.Status(); len(s) != 0 {
		t.Fatalf("a stream opened before the source published: %+v", s)
	}
	if st := up.Status().State; st != uplink.StateWaiting {
		t.Fatalf("state = %s, want %s", st, uplink.StateWaiting)
	}
	up.Update(serviceEntries(t, 3))
	testwait.For(t, waitFor, func() error {
		if n := objectCount(in); n != 3 {
			return fmt.Errorf("hub holds %d objects", n)
		}
		return up.Synced()
	})
}

// TestUplinkFollowsAMoveAtOnce: a hub replica that moves the spoke
// (ingest.Ownership.Move) with a redirect has it reconnect to the named
// replica at once — its backoff is an hour, so only a reconnect without
// backoff passes — with its full state; a move without a redirect brings
// it back through its own address, at once too. No reconnect is counted
// as a failure.
func TestUplinkFollowsAMoveAtOnce(t *testing.T) {
	a, addrA, _ := hubServer(t, "127.0.0.1:0")
	b, addrB, _ := hubServer(t, "127.0.0.1:0")
	reg := prometheus.NewRegistry()
	up := runUplink(t, uplink.Options{Address: addrA, Mesh: "m", Cluster: "c1", BackoffInitial: time.Hour, BackoffMax: time.Hour, Registerer: reg},
		serviceEntries(t, 5))
	id := ingest.ClusterIdentity{Mesh: "m", Cluster: "c1"}
	syncedOn := func(in *hubIngest) func() error {
		return func() error {
			h, ok := in.held(id)
			if !ok || !h.Connected || !h.Synced || objectCount(in) != 5 {
				return fmt.Errorf("not synced there: %+v (%d objects)", h, objectCount(in))
			}
			return up.Synced()
		}
	}
	testwait.For(t, waitFor, syncedOn(a))
	h, _ := a.held(id)
	if !a.own.Move(id, h.Epoch, "balancing spokes", addrB) {
		t.Fatal("Move reported no stream")
	}
	testwait.For(t, waitFor, syncedOn(b))
	if st := up.Status(); st.Target != addrB || st.Moves != 1 {
		t.Errorf("after the move: target %q, moves %d; want %s, 1", st.Target, st.Moves, addrB)
	}
	if h, _ := a.held(id); h.Connected {
		t.Error("the replica that moved the spoke still has its stream")
	}

	h, _ = b.held(id)
	if !b.own.Move(id, h.Epoch, "balancing spokes", "") {
		t.Fatal("Move reported no stream")
	}
	testwait.For(t, waitFor, syncedOn(a))
	if st := up.Status(); st.Target != addrA || st.Moves != 2 {
		t.Errorf("after a move without redirect: target %q, moves %d; want %s, 2", st.Target, st.Moves, addrA)
	}
	if n := metrictest.Value(t, reg, "nave_spoke_uplink_moves_total"); n != 2 {
		t.Errorf("nave_spoke_uplink_moves_total = %g, want 2", n)
	}
	if n := metrictest.Value(t, reg, "nave_spoke_uplink_reconnects_total"); n != 0 {
		t.Errorf("nave_spoke_uplink_reconnects_total = %g, want 0: a move is no failure", n)
	}
}
