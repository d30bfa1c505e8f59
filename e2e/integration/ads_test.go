package integration

import (
	"context"
	"net"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/ads"
	"github.com/navemesh/nave/xds/ads/adstest"
	"github.com/navemesh/nave/xds/cache"
	"github.com/navemesh/nave/xds/engine"
	"github.com/navemesh/nave/xds/pushctx"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
)

// The hub's composition of ingest, push context and ADS, fed by a spoke
// through the spoke protocol. The fixture and the raw ADS client below are
// the part of xds/ads's test fixture this test needs.

// quietFor is how long a test watches for something that must not happen.
const quietFor = 300 * time.Millisecond

const echoListener = "echo.demo.svc.cluster.local:7070"

func TestMeshIsAnsweredOnlyOnceAClusterSynced(t *testing.T) {
	var f *adsFixture
	in := newHubIngest(ingest.StoreOptions{
		StaleGracePeriod: time.Hour,
		OnChange:         func(meshName string, _ bool) { f.pc.Notify(meshName) },
	}, ingest.ServerOptions{})
	f = newADSFixture(t, in)
	spokes := serveGRPC(t, func(s *grpc.Server) { protocolv1.RegisterSyncServer(s, in.srv) })
	objs := pushctxtest.Decode(t, pushctxtest.EchoYAML(80, 20, "ROUND_ROBIN"))

	p := f.connect(t, node("proxy-1", "m"))
	p.Subscribe(typeurl.Listener, echoListener)
	p.Quiet(quietFor, "mesh m has no cluster")

	s := connectSpoke(t, spokes, "m", "c1")
	s.sendState(objs)
	p.Quiet(quietFor, "the only cluster has not synced")
	s.synced()
	lds := p.Next(typeurl.Listener)
	if got := adstest.Names(t, lds); !slices.Equal(got, []string{echoListener}) {
		t.Fatalf("listeners = %v, want %s", got, echoListener)
	}
	p.ACK(lds, echoListener)
	for _, typeURL := range []string{typeurl.Cluster, typeurl.Endpoint, typeurl.Route} {
		p.Subscribe(typeURL)
		p.ACK(p.Next(typeURL))
	}

	// The spoke reconnects with unchanged state: the mesh is rebuilt, and
	// nothing is pushed (docs/design.md invariant 4).
	before, _ := f.pc.Current("m")
	s.close()
	s2 := connectSpoke(t, spokes, "m", "c1")
	s2.sendState(pushctxtest.Decode(t, pushctxtest.EchoYAML(80, 20, "ROUND_ROBIN")))
	s2.synced()
	testwait.Until(t, "the reconnected cluster published", func() bool {
		st, _ := f.pc.Current("m")
		return st.Version > before.Version && len(st.Snapshot.Clusters) == 1 && st.Snapshot.Clusters[0].Synced && st.Snapshot.Clusters[0].Connected
	})
	p.Quiet(quietFor, "an unchanged reconnect")
}

// spokeStream is a Push stream, sent to as a spoke would.
type spokeStream struct {
	t       *testing.T
	stream  protocolv1.Sync_PushClient
	cancel  context.CancelFunc
	replies chan *discoveryv3.DeltaDiscoveryRequest
	done    chan struct{}
	nonce   int
}

func connectSpoke(t *testing.T, addr, meshName, cluster string) *spokeStream {
	t.Helper()
	md := metadata.Pairs(protocol.MetadataMesh, meshName, protocol.MetadataCluster, cluster, protocol.MetadataProtocol, protocol.Version)
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(context.Background(), md))
	stream, err := protocolv1.NewSyncClient(dialInsecure(t, addr)).Push(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &spokeStream{t: t, stream: stream, cancel: cancel, replies: make(chan *discoveryv3.DeltaDiscoveryRequest, 16), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			r, err := stream.Recv()
			if err != nil {
				return
			}
			select {
			case s.replies <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *spokeStream) close() {
	s.cancel()
	<-s.done
}

// send pushes one message and waits for its ACK.
func (s *spokeStream) send(typeURL string, objs []*meshconfig.Object) {
	s.t.Helper()
	s.nonce++
	msg := &discoveryv3.DeltaDiscoveryResponse{TypeUrl: typeURL, Nonce: strconv.Itoa(s.nonce), SystemVersionInfo: protocol.Version}
	for _, o := range objs {
		r, err := protocol.Encode(o)
		if err != nil {
			s.t.Fatal(err)
		}
		msg.Resources = append(msg.Resources, r)
	}
	if err := s.stream.Send(msg); err != nil {
		s.t.Fatal(err)
	}
	select {
	case r := <-s.replies:
		if r.GetResponseNonce() != msg.Nonce || r.GetErrorDetail() != nil {
			s.t.Fatalf("hub answered nonce %s with %v", msg.Nonce, r)
		}
	case <-s.done:
		s.t.Fatal("push stream ended")
	case <-time.After(waitFor):
		s.t.Fatalf("no answer to nonce %s", msg.Nonce)
	}
}

// sendState sends objs, one message per type in lexical order of type URL.
func (s *spokeStream) sendState(objs []*meshconfig.Object) {
	s.t.Helper()
	byType := map[string][]*meshconfig.Object{}
	for _, o := range objs {
		byType[o.Kind.TypeURL] = append(byType[o.Kind.TypeURL], o)
	}
	types := make([]string, 0, len(byType))
	for typeURL := range byType {
		types = append(types, typeURL)
	}
	sort.Strings(types)
	for _, typeURL := range types {
		s.send(typeURL, byType[typeURL])
	}
}

func (s *spokeStream) synced() {
	s.t.Helper()
	s.send(protocol.SyncedTypeURL, nil)
}

// adsFixture is an ADS server on loopback, serving a real cache (in
// verify mode) over a real pushctx.Publisher built on src.
type adsFixture struct {
	pc   *pushctx.Publisher
	c    *cache.Cache
	addr string
}

func newADSFixture(t testing.TB, src pushctx.Source) *adsFixture {
	t.Helper()
	f := &adsFixture{}
	eng := engine.New(src, engine.Options{
		Push:  pushctx.Options{DebounceQuiet: 10 * time.Millisecond, DebounceMax: 100 * time.Millisecond},
		Cache: cache.Options{Verify: true},
		ADS:   ads.Options{DefaultMesh: "m", Registerer: prometheus.NewRegistry()},
	})
	f.pc, f.c = eng.Publisher(), eng.Cache()
	t.Cleanup(func() {
		for _, m := range f.c.Mismatches() {
			t.Errorf("incremental generation: %s", m)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	eng.Start(ctx)
	srv := eng.ADS()
	f.addr = serveGRPC(t, func(s *grpc.Server) { discoveryv3.RegisterAggregatedDiscoveryServiceServer(s, srv) })
	return f
}

// serveGRPC starts a gRPC server on loopback; it stops with the test.
func serveGRPC(t testing.TB, register func(*grpc.Server)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.ForceServerCodecV2(ads.Codec())) // as the hub serves ADS
	register(gs)
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	t.Cleanup(func() {
		gs.Stop()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return lis.Addr().String()
}

// dialInsecure connects to addr without TLS; the connection closes with
// the test.
func dialInsecure(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// node is a proxy's node naming its mesh in metadata.
func node(id, meshName string) *corev3.Node {
	return &corev3.Node{Id: id, Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{ads.MetadataMesh: structpb.NewStringValue(meshName)}}}
}

// proxy is a raw SotW ADS client stream driven by the test.
type proxy = adstest.Proxy

// connect opens an ADS stream for n on a connection of its own, reading
// its responses until the stream ends or the test is cleaned up.
func (f *adsFixture) connect(t testing.TB, n *corev3.Node) *proxy {
	t.Helper()
	return adstest.Connect(t, dialInsecure(t, f.addr), n)
}
