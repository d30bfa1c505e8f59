package proxyless_test

import (
	"context"
	"fmt"
	"maps"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/xds"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/navemesh/nave/internal/xdstest"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/shared/xdsbootstrap"
	"github.com/navemesh/nave/xds/gen"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/gen/routes"
)

// TestGRPCRingHash runs real grpc-go xDS clients against generated
// proxyless resources: with consistentHash on a header, calls carrying
// one value stay on one backend while different values spread; with
// useSourceIp, a client channel stays on one backend.
func TestGRPCRingHash(t *testing.T) {
	const host = "ring.demo.svc.cluster.local"
	backends := xdstest.StartCountingBackends(t, "b0", "b1", "b2")
	var eps []string
	for _, name := range []string{"b0", "b1", "b2"} {
		eps = append(eps, backends.Endpoint(name, ""))
	}
	mesh := func(lb string) string { return xdstest.ServiceWithPolicy("ring", host, eps, "{loadBalancer: "+lb+"}") }
	// calls makes n calls on a fresh client channel, each with the
	// header value user(i) when user is set, and returns the backends
	// that served them, in call order.
	calls := func(t *testing.T, out *gen.Output, n int, user func(int) string) []string {
		t.Helper()
		conn := grpcClient(t, out, "xds:///"+host+":7070")
		client := healthpb.NewHealthClient(conn)
		var served []string
		for i := range n {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if user != nil {
				ctx = metadata.AppendToOutgoingContext(ctx, "x-user", user(i))
			}
			backends.Reset()
			_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
			cancel()
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			for b := range backends.Hits() {
				served = append(served, b)
			}
		}
		return served
	}
	distinct := func(s []string) int {
		m := map[string]bool{}
		for _, x := range s {
			m[x] = true
		}
		return len(m)
	}

	// The control: round robin spreads one user's calls (once more than
	// one backend's connection is up: the first calls may all go to the
	// first one ready, so it keeps calling, within a deadline).
	t.Run("round robin", func(t *testing.T) {
		out := gen.GRPC(gentest.Snapshot(t, map[string]string{"c1": mesh("{simple: ROUND_ROBIN}")}))
		client := healthpb.NewHealthClient(grpcClient(t, out, "xds:///"+host+":7070"))
		reached := map[string]int{}
		for deadline := time.Now().Add(10 * time.Second); len(reached) < 2 && time.Now().Before(deadline); {
			backends.Reset()
			ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-user", "alice"), 10*time.Second)
			_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			maps.Copy(reached, backends.Hits())
		}
		if len(reached) < 2 {
			t.Errorf("round robin reached only %v", reached)
		}
	})
	t.Run("header", func(t *testing.T) {
		out := gen.GRPC(gentest.Snapshot(t, map[string]string{"c1": mesh("{consistentHash: {httpHeaderName: x-user}}")}))
		if len(out.Problems) > 0 {
			t.Errorf("problems: %v", out.Problems)
		}
		if got := calls(t, out, 10, func(int) string { return "alice" }); distinct(got) != 1 {
			t.Errorf("one user reached %v, want one backend", got)
		}
		// 30 users all hashing to one of three backends: about 3^-29.
		if got := calls(t, out, 30, func(i int) string { return fmt.Sprintf("user-%d", i) }); distinct(got) < 2 {
			t.Errorf("30 users reached only %v", got)
		}
	})
	t.Run("useSourceIp", func(t *testing.T) {
		out := gen.GRPC(gentest.Snapshot(t, map[string]string{"c1": mesh("{consistentHash: {useSourceIp: true}}")}))
		if len(out.Problems) > 0 {
			t.Errorf("problems: %v", out.Problems)
		}
		if got := calls(t, out, 10, nil); distinct(got) != 1 {
			t.Errorf("one channel reached %v, want one backend", got)
		}
	})
}

// grpcClient dials target with a grpc-go xDS resolver of its own whose
// management server serves out (state of the world, by resource name).
func grpcClient(t *testing.T, out *gen.Output, target string) *grpc.ClientConn {
	t.Helper()
	ads := &outputADS{t: t, out: out}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(srv, ads)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	bootstrap, err := xdsbootstrap.New(lis.Addr().String(), "grpc-client~"+t.Name(), nil, nil).JSON()
	if err != nil {
		t.Fatal(err)
	}
	resolver, err := xds.NewXDSResolverWithConfigForTesting(bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(resolver))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		if n := ads.nacks(); len(n) > 0 {
			t.Errorf("grpc-go refused resources: %v", n)
		}
	})
	return conn
}

// outputADS answers every request with the resources of out it names.
type outputADS struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	t      *testing.T
	out    *gen.Output
	mu     sync.Mutex
	nacked []string
}

func (a *outputADS) nacks() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.nacked...)
}

func (a *outputADS) StreamAggregatedResources(stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	sent := map[string]string{} // type URL → names sent
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil
		}
		if d := req.GetErrorDetail(); d != nil {
			a.mu.Lock()
			a.nacked = append(a.nacked, req.GetTypeUrl()+": "+d.GetMessage())
			a.mu.Unlock()
			continue
		}
		names := strings.Join(req.GetResourceNames(), ",")
		if sent[req.GetTypeUrl()] == names {
			continue // an ACK
		}
		sent[req.GetTypeUrl()] = names
		resp := &discoveryv3.DiscoveryResponse{TypeUrl: req.GetTypeUrl(), VersionInfo: "1", Nonce: names}
		for _, r := range a.out.Resources[req.GetTypeUrl()] {
			for _, name := range req.GetResourceNames() {
				if r.Name == name {
					m, err := anypb.New(r.Message)
					if err != nil {
						return err
					}
					resp.Resources = append(resp.Resources, m)
				}
			}
		}
		if err := stream.Send(resp); err != nil {
			return nil
		}
	}
}

// TestGRPCRingHashResources: what grpc-go cannot do with consistentHash
// is reported naming the field — cookies and query parameters (no hash
// policy: each call hashes at random), Maglev (a ring instead), rings
// above grpc-go's limit — and routes of a VirtualService carry their
// destination's hash policy.
func TestGRPCRingHashResources(t *testing.T) {
	out := gen.GRPC(gentest.Snapshot(t, map[string]string{"c1": `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ring, namespace: demo}
spec:
  hosts: [ring.demo.svc.cluster.local]
  location: MESH_INTERNAL
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.1, labels: {v: a}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: ring, namespace: demo}
spec:
  host: ring.demo.svc.cluster.local
  trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-user, ringHash: {minimumRingSize: 2048}}}}
  subsets:
  - {name: cookie, labels: {v: a}, trafficPolicy: {loadBalancer: {consistentHash: {httpCookie: {name: s, ttl: 1s}}}}}
  - {name: query, labels: {v: a}, trafficPolicy: {loadBalancer: {consistentHash: {httpQueryParameterName: u}}}}
  - {name: maglev, labels: {v: a}, trafficPolicy: {loadBalancer: {consistentHash: {useSourceIp: true, maglev: {tableSize: 65537}}}}}
  - {name: huge, labels: {v: a}, trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x, ringHash: {minimumRingSize: 100000000}}}}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ring, namespace: demo}
spec:
  hosts: [ring.demo.svc.cluster.local]
  http:
  - match: [{headers: {x-q: {exact: "1"}}}]
    route: [{destination: {host: ring.demo.svc.cluster.local, subset: query}}]
  - route: [{destination: {host: ring.demo.svc.cluster.local, subset: maglev}}]
`}))
	gentest.ValidateAll(t, out)
	for name, want := range map[string]uint64{
		"outbound|7070||ring.demo.svc.cluster.local":       2048,
		"outbound|7070|cookie|ring.demo.svc.cluster.local": 0,
		"outbound|7070|maglev|ring.demo.svc.cluster.local": 0,
		"outbound|7070|huge|ring.demo.svc.cluster.local":   8 * 1024 * 1024,
	} {
		c, _ := gentest.ByName(out, typeurl.Cluster, name).Message.(*clusterv3.Cluster)
		if c.GetLbPolicy() != clusterv3.Cluster_RING_HASH || c.GetRingHashLbConfig().GetMinimumRingSize().GetValue() != want ||
			c.GetRingHashLbConfig().GetHashFunction() != clusterv3.Cluster_RingHashLbConfig_XX_HASH {
			t.Errorf("%s: lb %v %v, want RING_HASH (xxHash) with minimum ring size %d", name, c.GetLbPolicy(), c.GetRingHashLbConfig(), want)
		}
	}
	rc, _ := gentest.ByName(out, typeurl.Route, "ring.demo.svc.cluster.local:7070").Message.(*routev3.RouteConfiguration)
	rs := rc.GetVirtualHosts()[0].GetRoutes()
	if len(rs) != 2 || len(rs[0].GetRoute().GetHashPolicy()) != 0 ||
		rs[1].GetRoute().GetHashPolicy()[0].GetFilterState().GetKey() != routes.GRPCChannelIDKey {
		t.Errorf("routes %v: want no hash policy to the query subset, the channel id to the maglev subset", rs)
	}
	for _, want := range []string{
		"spec.subsets[0].trafficPolicy.loadBalancer.consistentHash.httpCookie",
		"spec.subsets[1].trafficPolicy.loadBalancer.consistentHash.httpQueryParameterName",
		"spec.subsets[2].trafficPolicy.loadBalancer.consistentHash.maglev",
		"spec.subsets[3].trafficPolicy.loadBalancer.consistentHash.ringHash.minimumRingSize",
	} {
		found := false
		for _, p := range out.Problems {
			found = found || (p.Resource == "c1:DestinationRule demo/ring" && p.Field == want)
		}
		if !found {
			t.Errorf("no problem %s in %v", want, out.Problems)
		}
	}
}
