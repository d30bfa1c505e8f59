package poll

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/meshconfig"
)

// fullState is a cluster's full state of n ServiceEntries as a spoke sends
// it: one message of resources, then the synced marker.
func fullState(tb testing.TB, n int) []*discoveryv3.DeltaDiscoveryResponse {
	tb.Helper()
	var y strings.Builder
	for i := range n {
		fmt.Fprintf(&y, `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: svc-%d, namespace: demo}
spec:
  hosts: [svc-%d.demo.svc.cluster.local]
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  endpoints: [{address: 10.0.%d.%d, ports: {grpc: 7070}}]
`, i, i, i/250, i%250)
	}
	objs, errs := meshconfig.DecodeYAML([]byte(y.String()), "bench.yaml")
	if len(errs) > 0 || len(objs) != n {
		tb.Fatalf("decode: %d objects, %v", len(objs), errs)
	}
	msg := &discoveryv3.DeltaDiscoveryResponse{TypeUrl: objs[0].Kind.TypeURL, Nonce: "1", SystemVersionInfo: protocol.Version}
	for _, o := range objs {
		r, err := protocol.Encode(o)
		if err != nil {
			tb.Fatal(err)
		}
		msg.Resources = append(msg.Resources, r)
	}
	return []*discoveryv3.DeltaDiscoveryResponse{msg, {TypeUrl: protocol.SyncedTypeURL, Nonce: "2", SystemVersionInfo: protocol.Version}}
}

// spokeEnd is a spoke's end of a sync stream, Push or Poll.
type spokeEnd interface {
	Send(*discoveryv3.DeltaDiscoveryResponse) error
	Recv() (*discoveryv3.DeltaDiscoveryRequest, error)
}

// sendState sends msgs and waits for every answer, failing on a NACK.
func sendState(s spokeEnd, msgs []*discoveryv3.DeltaDiscoveryResponse) error {
	for _, m := range msgs {
		if err := s.Send(m); err != nil {
			return err
		}
	}
	for range msgs {
		r, err := s.Recv()
		if err != nil {
			return err
		}
		if r.GetErrorDetail() != nil {
			return fmt.Errorf("NACK: %s", r.GetErrorDetail().GetMessage())
		}
	}
	return nil
}

// benchSpoke serves Poll: each stream gets the full state; the result of
// each stream goes to done.
type benchSpoke struct {
	protocolv1.UnimplementedPolledServer
	msgs []*discoveryv3.DeltaDiscoveryResponse
	done chan error
}

func (f *benchSpoke) Poll(s protocolv1.Polled_PollServer) error {
	if err := s.SendHeader(metadata.Pairs(protocol.MetadataMesh, "default", protocol.MetadataCluster, "bench")); err != nil {
		return err
	}
	err := sendState(s, f.msgs)
	f.done <- err
	<-s.Context().Done()
	return nil
}

func serve(tb testing.TB, register func(*grpc.Server)) *grpc.ClientConn {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(64 << 20))
	register(srv)
	go func() { _ = srv.Serve(lis) }()
	tb.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	return conn
}

// benchmarkFullState measures one (re)connect of a cluster of n
// resources, from opening the stream to the hub's ACK of the synced
// marker: the spoke dialling the hub (push) and the hub dialling the spoke
// through the adapter (polled), into the same ingest.
func benchmarkFullState(b *testing.B, n int) {
	msgs := fullState(b, n)
	id := ingest.ClusterIdentity{Mesh: "default", Cluster: "bench"}
	b.Run("push", func(b *testing.B) {
		in := ingest.NewServer(ingest.NewStore(ingest.StoreOptions{StaleGracePeriod: 1 << 40}), ingest.ClaimedIdentity(), ingest.ServerOptions{})
		conn := serve(b, func(s *grpc.Server) { protocolv1.RegisterSyncServer(s, in) })
		md := metadata.Pairs(protocol.MetadataMesh, id.Mesh, protocol.MetadataCluster, id.Cluster)
		b.ResetTimer()
		for range b.N {
			ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(context.Background(), md))
			st, err := protocolv1.NewSyncClient(conn).Push(ctx)
			if err == nil {
				err = sendState(st, msgs)
			}
			cancel()
			if err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(n), "resources/op")
	})
	b.Run("polled", func(b *testing.B) {
		in := ingest.NewServer(ingest.NewStore(ingest.StoreOptions{StaleGracePeriod: 1 << 40}), ingest.ClaimedIdentity(), ingest.ServerOptions{})
		spoke := &benchSpoke{msgs: msgs, done: make(chan error, 1)}
		conn := serve(b, func(s *grpc.Server) { protocolv1.RegisterPolledServer(s, spoke) })
		var pending []chan struct{}
		defer func() {
			for _, p := range pending {
				<-p
			}
		}()
		b.ResetTimer()
		for range b.N {
			ctx, cancel := context.WithCancel(context.Background())
			cs, err := protocolv1.NewPolledClient(conn).Poll(ctx)
			if err != nil {
				b.Fatal(err)
			}
			header, err := cs.Header()
			if err != nil {
				b.Fatal(err)
			}
			served := make(chan struct{})
			go func() {
				defer close(served)
				_ = in.Poll(asServer(cs, header, nil), id)
			}()
			err = <-spoke.done
			cancel()
			pending = append(pending, served)
			if err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(n), "resources/op")
	})
}

// BenchmarkFullState: a cluster of 1,000 ServiceEntries reconnecting.
func BenchmarkFullState(b *testing.B) { benchmarkFullState(b, 1000) }

// TestBenchmarksRunOnce is the benchmarks' test twin (a small cluster).
func TestBenchmarksRunOnce(t *testing.T) {
	r := testing.Benchmark(func(b *testing.B) { benchmarkFullState(b, 10) })
	if r.N == 0 {
		t.Fatal("the benchmark did not run")
	}
}
