package ads_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/navemesh/nave/internal/metrictest"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/ads"
	"github.com/navemesh/nave/xds/ads/adstest"
	"github.com/navemesh/nave/xds/cache"
	"github.com/navemesh/nave/xds/engine"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/pushctx"
)

// waitFor bounds every wait for something that must happen; a passing
// test never waits for it.
const waitFor = 10 * time.Second

// quietFor is how long a test watches for something that must not happen.
const quietFor = 300 * time.Millisecond

const (
	echoHost     = "echo.demo.svc.cluster.local"
	echoListener = "echo.demo.svc.cluster.local:7070"
	echoCluster  = "outbound|7070||echo.demo.svc.cluster.local"
	echoV1       = "outbound|7070|v1|echo.demo.svc.cluster.local"
	echoV2       = "outbound|7070|v2|echo.demo.svc.cluster.local"
)

// source is a pushctx.Source whose clusters the test sets.
type source struct {
	mu       sync.Mutex
	clusters map[string][]mesh.ClusterInput
}

func (s *source) Clusters(meshName string) []mesh.ClusterInput {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]mesh.ClusterInput(nil), s.clusters[meshName]...)
}

// fixture is an ADS server on loopback, serving a real cache over a real
// pushctx.Publisher.
type fixture struct {
	src  pushctx.Source
	fake *source // src when the test feeds clusters directly
	pc   *pushctx.Publisher
	c    *cache.Cache
	ads  *ads.Server
	addr string
	reg  *prometheus.Registry
}

// metric sums the values of the ADS server's metric name (counters and
// gauges; for histograms the sample count; all label values).
func (f *fixture) metric(t testing.TB, name string) float64 {
	t.Helper()
	return metrictest.Value(t, f.reg, name)
}

// newFixture serves the push contexts built from src; with a nil src the
// test sets clusters with f.set.
func newFixture(t testing.TB, src pushctx.Source, opts ...func(*ads.Options)) *fixture {
	t.Helper()
	return newFixtureVerify(t, src, true, opts...)
}

// newFixtureVerify is newFixture with pushctx's verify mode (every reused
// generation checked against one from scratch) on or off.
func newFixtureVerify(t testing.TB, src pushctx.Source, verify bool, opts ...func(*ads.Options)) *fixture {
	t.Helper()
	f := &fixture{src: src}
	if src == nil {
		f.fake = &source{clusters: map[string][]mesh.ClusterInput{}}
		f.src = f.fake
	}
	f.reg = prometheus.NewRegistry()
	o := ads.Options{DefaultMesh: "m", Registerer: f.reg}
	for _, fn := range opts {
		fn(&o)
	}
	eng := engine.New(f.src, engine.Options{
		Push:  pushctx.Options{DebounceQuiet: 10 * time.Millisecond, DebounceMax: 100 * time.Millisecond},
		Cache: cache.Options{Verify: verify},
		ADS:   o,
	})
	f.pc, f.c, f.ads = eng.Publisher(), eng.Cache(), eng.ADS()
	t.Cleanup(func() {
		for _, m := range f.c.Mismatches() {
			t.Errorf("incremental generation: %s", m)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	eng.Start(ctx)
	f.addr = serve(t, func(s *grpc.Server) { discoveryv3.RegisterAggregatedDiscoveryServiceServer(s, f.ads) })
	return f
}

// serve starts a gRPC server on loopback; it stops with the test.
func serve(t testing.TB, register func(*grpc.Server)) string {
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

// dial connects to addr; the connection closes with the test.
func dial(t testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// set replaces a mesh's clusters and waits until a State built from them
// is published.
func (f *fixture) set(t testing.TB, meshName string, clusters ...mesh.ClusterInput) *cache.Entry {
	t.Helper()
	f.fake.mu.Lock()
	f.fake.clusters[meshName] = clusters
	f.fake.mu.Unlock()
	return f.republish(t, meshName)
}

// republish makes the Publisher rebuild meshName and waits for the new State.
func (f *fixture) republish(t testing.TB, meshName string) *cache.Entry {
	t.Helper()
	_, changed := f.pc.Current(meshName)
	f.pc.Notify(meshName)
	select {
	case <-changed:
	case <-time.After(waitFor):
		t.Fatalf("mesh %s was not published", meshName)
	}
	st, _ := f.pc.Current(meshName)
	return f.c.Entry(st)
}

// synced is a connected, synced cluster holding objs.
func synced(name string, objs []*meshconfig.Object) mesh.ClusterInput {
	return mesh.ClusterInput{Name: name, Connected: true, Synced: true, Objects: objs}
}

// node is a proxy's node naming its mesh in metadata (none if meshName is "").
func node(id, meshName string) *corev3.Node {
	n := &corev3.Node{Id: id}
	if meshName != "" {
		n.Metadata = &structpb.Struct{Fields: map[string]*structpb.Value{ads.MetadataMesh: structpb.NewStringValue(meshName)}}
	}
	return n
}

// proxy is a raw SotW ADS client stream driven by the test.
type proxy = adstest.Proxy

// connect opens an ADS stream for n on a connection of its own, dialled
// with opts, reading its responses (adstest.Connect).
func (f *fixture) connect(t testing.TB, n *corev3.Node, opts ...grpc.DialOption) *proxy {
	t.Helper()
	return adstest.Connect(t, dial(t, f.addr, opts...), n)
}

// open opens an ADS stream on conn without reading from it.
func (f *fixture) open(t testing.TB, conn *grpc.ClientConn, n *corev3.Node) *proxy {
	t.Helper()
	return adstest.Open(t, conn, n)
}

// connStatus returns the ADS status of the one connection of node id.
func (f *fixture) connStatus(t testing.TB, nodeID string) ads.ConnStatus {
	t.Helper()
	var found []ads.ConnStatus
	for _, cs := range f.ads.Status() {
		if cs.NodeID == nodeID {
			found = append(found, cs)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d connections of node %s, want 1", len(found), nodeID)
	}
	return found[0]
}

// shortName is the type name /debug/syncz uses ("Listener").
func shortName(typeURL string) string { return typeURL[strings.LastIndex(typeURL, ".")+1:] }

// weights returns the weighted clusters of the first route of a route
// configuration response's only resource.
func weights(t testing.TB, resp *discoveryv3.DiscoveryResponse) map[string]uint32 {
	t.Helper()
	if len(resp.GetResources()) != 1 {
		t.Fatalf("%d route configurations, want 1", len(resp.GetResources()))
	}
	var rc routev3.RouteConfiguration
	if err := resp.GetResources()[0].UnmarshalTo(&rc); err != nil {
		t.Fatal(err)
	}
	// The weights of the first route of the first virtual host.
	out := map[string]uint32{}
	if vhs := rc.GetVirtualHosts(); len(vhs) > 0 && len(vhs[0].GetRoutes()) > 0 {
		for _, wc := range vhs[0].GetRoutes()[0].GetRoute().GetWeightedClusters().GetClusters() {
			out[wc.GetName()] = wc.GetWeight().GetValue()
		}
	}
	return out
}

// ports returns the endpoint ports of an endpoints response's resources.
func ports(t testing.TB, resp *discoveryv3.DiscoveryResponse) map[uint32]int {
	t.Helper()
	out := map[uint32]int{}
	for _, a := range resp.GetResources() {
		var cla endpointv3.ClusterLoadAssignment
		if err := a.UnmarshalTo(&cla); err != nil {
			t.Fatal(err)
		}
		for _, l := range cla.GetEndpoints() {
			for _, e := range l.GetLbEndpoints() {
				out[e.GetEndpoint().GetAddress().GetSocketAddress().GetPortValue()]++
			}
		}
	}
	return out
}
