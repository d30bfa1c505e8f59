package server

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/navemesh/nave/hub/enroll"
	"github.com/navemesh/nave/hub/hubconfig"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/settings"
)

// startPlaintextHub runs a plaintext hub in process on state until the
// test ends or the returned stop is called.
func startPlaintextHub(t *testing.T, state string) (*Server, func()) {
	t.Helper()
	return runHub(t, "--tls.plaintext", "--state.dir="+state, "--ingest.startup-grace=1h")
}

// runHub runs a hub with args on free ports until the test ends or the
// returned stop is called.
func runHub(t testing.TB, args ...string) (*Server, func()) {
	t.Helper()
	var cfg hubconfig.Config
	args = append(args, "--admin.listen=127.0.0.1:0", "--spokes.listen=127.0.0.1:0", "--xds.listen=127.0.0.1:0")
	if err := settings.Load(hubconfig.Program, &cfg, args, io.Discard); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := New(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return s, stop
}

// syncCluster opens a Push stream of (mesh "default", cluster) in
// plaintext and sends the synced marker of an empty full state; the
// stream stays open until the test ends.
func syncCluster(t *testing.T, s *Server, cluster string) {
	t.Helper()
	conn, err := grpc.NewClient(s.Addr("spokes.listen").String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx := metadata.NewOutgoingContext(t.Context(), metadata.Pairs(protocol.MetadataMesh, "default",
		protocol.MetadataCluster, cluster, protocol.MetadataProtocol, protocol.Version))
	stream, err := protocolv1.NewSyncClient(conn).Push(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: protocol.SyncedTypeURL, Nonce: "1"}); err != nil {
		t.Fatal(err)
	}
	ack, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if ack.GetErrorDetail() != nil {
		t.Fatalf("synced marker of %s NACKed: %v", cluster, ack.GetErrorDetail())
	}
}

// TestRestartedPlaintextHubWaitsForEveryKnownCluster: in plaintext mode
// nothing is enrolled, but the clusters that synced are remembered in the
// state store (enroll/known/), so a restarted hub serves a mesh only once
// every cluster it had has synced again (within ingest.startupGrace), as
// with TLS (issue 30, "Also").
func TestRestartedPlaintextHubWaitsForEveryKnownCluster(t *testing.T) {
	state := t.TempDir()
	s, stop := startPlaintextHub(t, state)
	syncCluster(t, s, "c1")
	syncCluster(t, s, "c2")
	for _, c := range []string{"c1", "c2"} {
		testwait.Until(t, "cluster "+c+" is remembered in the state dir", func() bool {
			_, err := os.Stat(filepath.Join(state, enroll.StateSubdir, "known", "default."+c+".json"))
			return err == nil
		})
	}
	stop()

	s, _ = startPlaintextHub(t, state)
	syncCluster(t, s, "c1")
	testwait.Until(t, "c1 synced at the restarted hub", func() bool {
		for _, cs := range s.store.Status() {
			if cs.Cluster == "c1" && cs.Synced {
				return true
			}
		}
		return false
	})
	if s.store.Ready("default", s.store.Clusters("default")) {
		t.Fatal("the restarted plaintext hub serves mesh default with c1 alone, though c2 synced before the restart")
	}
	missing := false
	for _, cs := range s.store.Status() {
		missing = missing || cs.Cluster == "c2" && cs.Missing != nil
	}
	if !missing {
		t.Error("c2 is not listed as missing while the restarted hub waits for it")
	}
	syncCluster(t, s, "c2")
	testwait.Until(t, "mesh default ready once c1 and c2 synced again", func() bool {
		return s.store.Ready("default", s.store.Clusters("default"))
	})
	// The mesh's limits are the hub's defaults, and its two clusters
	// count against limits.spokes.
	lim, use := s.limits.of("default"), s.limitMetrics.Of("default")
	if lim.Spokes != 500 || lim.ObjectsPerKind != 20000 || lim.Proxies != 10000 || lim.PushesPerSecond != 50 {
		t.Errorf("limits of mesh default = %+v, want the hub's defaults", lim)
	}
	if use.Usage["spokes"] != 2 {
		t.Errorf("mesh default uses %v of its spokes limit, want 2", use.Usage["spokes"])
	}
}
