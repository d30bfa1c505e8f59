package ads_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/xds"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/internal/xdstest"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/shared/xdsbootstrap"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
)

const locHost = "loc.demo.svc.cluster.local"

// localityClient is a real grpc-go xDS client of the fixture's ADS (its
// own xDS client and resolver) whose bootstrap node has the given
// locality ("region/zone") and labels, calling locHost:7070.
type localityClient struct {
	t      *testing.T
	b      *xdstest.CountingBackends
	health healthpb.HealthClient
}

func newLocalityClient(t *testing.T, f *fixture, b *xdstest.CountingBackends, id, locality string, labels map[string]any) *localityClient {
	t.Helper()
	meta := map[string]any{}
	if labels != nil {
		meta["LABELS"] = labels
	}
	return newLocalityClientMeta(t, f, b, id, locality, meta)
}

// newLocalityClientMeta is newLocalityClient with node metadata of its
// own (GENERATOR and NAMESPACE are added); locality "" writes none.
func newLocalityClientMeta(t *testing.T, f *fixture, b *xdstest.CountingBackends, id, locality string, meta map[string]any) *localityClient {
	t.Helper()
	meta["GENERATOR"], meta["NAMESPACE"] = "grpc", "demo"
	bs := xdsbootstrap.New(f.addr, id, meta, nil)
	if locality != "" {
		region, zone, _ := strings.Cut(locality, "/")
		bs = bs.WithLocality(region, zone, "")
	}
	bootstrap, err := bs.JSON()
	if err != nil {
		t.Fatal(err)
	}
	resolver, err := xds.NewXDSResolverWithConfigForTesting(bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///"+locHost+":7070", grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(resolver))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &localityClient{t: t, b: b, health: healthpb.NewHealthClient(conn)}
}

// call makes one call and returns the backend that served it. Clients
// call one at a time (the backends count every client's calls).
func (c *localityClient) call() string {
	c.t.Helper()
	c.b.Reset()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := c.health.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		c.t.Fatalf("call: %v", err)
	}
	for name := range c.b.Hits() {
		return name
	}
	c.t.Fatal("a call succeeded but no backend counted it")
	return ""
}

// calls makes n calls and counts them per backend.
func (c *localityClient) calls(n int) map[string]int {
	c.t.Helper()
	got := map[string]int{}
	for range n {
		got[c.call()]++
	}
	return got
}

// until calls until a call is served by one of want (config reaches the
// client in its own time), failing the test after waitFor.
func (c *localityClient) until(what string, want ...string) {
	c.t.Helper()
	testwait.For(c.t, waitFor, func() error {
		if got := c.call(); !slices.Contains(want, got) {
			return fmt.Errorf("%s: calls still served by %s, want %v", what, got, want)
		}
		return nil
	})
}

// localityMesh is locHost with the given backends' endpoints (locality
// "<name>/z1", label tier=<name>) and trafficPolicy.
func localityMesh(t *testing.T, b *xdstest.CountingBackends, trafficPolicy string, names ...string) mesh.ClusterInput {
	t.Helper()
	var eps []string
	for _, name := range names {
		eps = append(eps, b.Endpoint(name, fmt.Sprintf(", locality: %s/z1, labels: {tier: %s}", name, name)))
	}
	return synced("c1", pushctxtest.Decode(t, xdstest.ServiceWithPolicy("loc", locHost, eps, trafficPolicy)))
}

// TestProxylessLocalityByProximity: two real grpc-go clients with
// different bootstrap localities call a service with a backend in each
// locality; the DestinationRule has outlierDetection and no
// localityLbSetting (failover by proximity, as Istio does). Each client's
// calls stay in its own locality; when the local endpoint goes, the
// client fails over to the other locality, and returns once it is back.
func TestProxylessLocalityByProximity(t *testing.T) {
	b := xdstest.StartCountingBackends(t, "r1", "r2")
	f := newFixture(t, nil)
	const policy = "{outlierDetection: {consecutive5xxErrors: 5, interval: 10s}}"
	f.set(t, "m", localityMesh(t, b, policy, "r1", "r2"))
	c1 := newLocalityClient(t, f, b, "client-r1", "r1/z1", nil)
	c2 := newLocalityClient(t, f, b, "client-r2", "r2/z1", nil)
	if got := c1.calls(20); got["r1"] != 20 {
		t.Errorf("client in r1: served by %v, want r1 only", got)
	}
	if got := c2.calls(20); got["r2"] != 20 {
		t.Errorf("client in r2: served by %v, want r2 only", got)
	}

	f.set(t, "m", localityMesh(t, b, policy, "r2"))
	c1.until("r1's endpoint removed", "r2")
	if got := c1.calls(20); got["r2"] != 20 {
		t.Errorf("client in r1 after r1 left: served by %v, want r2 only", got)
	}
	if got := c2.calls(10); got["r2"] != 10 {
		t.Errorf("client in r2 after r1 left: served by %v, want r2 only", got)
	}

	f.set(t, "m", localityMesh(t, b, policy, "r1", "r2"))
	c1.until("r1's endpoint back", "r1")
	if got := c1.calls(20); got["r1"] != 20 {
		t.Errorf("client in r1 after r1 came back: served by %v, want r1 only", got)
	}
	if got := c2.calls(20); got["r2"] != 20 {
		t.Errorf("client in r2 after r1 came back: served by %v, want r2 only", got)
	}
	if mm := f.c.Mismatches(); len(mm) > 0 {
		t.Errorf("mismatches: %v", mm)
	}
}

// TestProxylessLocalitySettings: real grpc-go clients get the
// localityLbSetting fields that depend on the client applied for their
// own locality and labels: failover from their region, failoverPriority
// compared with their labels, distribute from their locality.
func TestProxylessLocalitySettings(t *testing.T) {
	b := xdstest.StartCountingBackends(t, "r1", "r2", "r3")
	f := newFixture(t, nil)

	t.Run("failover", func(t *testing.T) {
		const policy = "{loadBalancer: {localityLbSetting: {failover: [{from: r1, to: r3}]}}, outlierDetection: {consecutive5xxErrors: 5, interval: 10s}}"
		f.set(t, "m", localityMesh(t, b, policy, "r1", "r2", "r3"))
		c := newLocalityClient(t, f, b, "failover-r1", "r1/z1", nil)
		if got := c.calls(10); got["r1"] != 10 {
			t.Errorf("served by %v, want r1 only", got)
		}
		// Without r1, r3 (failover's target) comes before r2.
		f.set(t, "m", localityMesh(t, b, policy, "r2", "r3"))
		c.until("r1's endpoint removed", "r2", "r3")
		if got := c.calls(20); got["r3"] != 20 {
			t.Errorf("after r1 left, served by %v, want r3 (failover from r1) only", got)
		}
	})
	t.Run("failoverPriority", func(t *testing.T) {
		const policy = "{loadBalancer: {localityLbSetting: {failoverPriority: [tier]}}, outlierDetection: {consecutive5xxErrors: 5, interval: 10s}}"
		f.set(t, "m", localityMesh(t, b, policy, "r1", "r2", "r3"))
		// Both clients in r1; their tier label decides.
		c2 := newLocalityClient(t, f, b, "tier-r2", "r1/z1", map[string]any{"tier": "r2"})
		c3 := newLocalityClient(t, f, b, "tier-r3", "r1/z1", map[string]any{"tier": "r3"})
		if got := c2.calls(20); got["r2"] != 20 {
			t.Errorf("client with tier r2: served by %v, want r2 only", got)
		}
		if got := c3.calls(20); got["r3"] != 20 {
			t.Errorf("client with tier r3: served by %v, want r3 only", got)
		}
	})
	t.Run("distribute", func(t *testing.T) {
		const policy = `{loadBalancer: {localityLbSetting: {distribute: [{from: "r1/*", to: {"r1/*": 80, "r2/*": 20}}]}}}`
		f.set(t, "m", localityMesh(t, b, policy, "r1", "r2"))
		c1 := newLocalityClient(t, f, b, "distribute-r1", "r1/z1", nil)
		c2 := newLocalityClient(t, f, b, "distribute-r2", "r2/z1", nil)
		// The first calls may go to the first locality connected: call
		// until both served.
		for _, c := range []*localityClient{c1, c2} {
			c.until("r1 connected", "r1")
			c.until("r2 connected", "r2")
		}
		// r1's client: 80/20 (expect 240 of 300; σ ≈ 7).
		if got := c1.calls(300); got["r1"] < 180 || got["r1"] > 285 {
			t.Errorf("client in r1: served by %v, want about 240 by r1 and 60 by r2", got)
		}
		// r2's client matches no from: both localities alike (σ ≈ 9).
		if got := c2.calls(300); got["r1"] < 90 || got["r1"] > 210 {
			t.Errorf("client in r2: served by %v, want about 150 each", got)
		}
	})
	if mm := f.c.Mismatches(); len(mm) > 0 {
		t.Errorf("mismatches: %v", mm)
	}
}

// TestProxylessLocalityDelta: the delta ADS variant serves proxyless
// clients their own locality's assignment too, and the SotW variant the
// same bytes.
func TestProxylessLocalityDelta(t *testing.T) {
	b := xdstest.StartCountingBackends(t, "r1", "r2")
	f := newFixture(t, nil)
	f.set(t, "m", localityMesh(t, b, "{outlierDetection: {consecutive5xxErrors: 5}}", "r1", "r2"))
	const cluster = "outbound|7070||" + locHost
	node := func(id, region string) *corev3.Node {
		return &corev3.Node{Id: id, Locality: &corev3.Locality{Region: region, Zone: "z1"},
			Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{"GENERATOR": structpb.NewStringValue("grpc"), "MESH": structpb.NewStringValue("m")}}}
	}
	first := func(t *testing.T, raw []byte) string {
		cla := &endpointv3.ClusterLoadAssignment{}
		if err := proto.Unmarshal(raw, cla); err != nil {
			t.Fatal(err)
		}
		for _, lle := range cla.GetEndpoints() {
			if lle.GetPriority() == 0 {
				return lle.GetLocality().GetRegion()
			}
		}
		return ""
	}
	for _, region := range []string{"r1", "r2"} {
		d := f.connectDelta(t, node("delta-"+region, region))
		d.subscribe(typeurl.Endpoint, cluster)
		r := d.next(typeurl.Endpoint)
		d.ack(r)
		if got := first(t, d.held[typeurl.Endpoint][cluster]); got != region {
			t.Errorf("delta client in %s: priority 0 is %q, want its own region", region, got)
		}
		s := f.connect(t, node("sotw-"+region, region))
		s.Subscribe(typeurl.Endpoint, cluster)
		held := sotwHeld(t, s.Next(typeurl.Endpoint))
		if !proto.Equal(rawCLA(t, held[cluster]), rawCLA(t, d.held[typeurl.Endpoint][cluster])) {
			t.Errorf("client in %s: SotW and delta assignments differ", region)
		}
	}
}

func rawCLA(t *testing.T, raw []byte) *endpointv3.ClusterLoadAssignment {
	t.Helper()
	cla := &endpointv3.ClusterLoadAssignment{}
	if err := proto.Unmarshal(raw, cla); err != nil {
		t.Fatal(err)
	}
	return cla
}

// TestProxylessLocalityFromTheRegistry: clients whose bootstrap states no
// locality — as the ones nave-agent and navectl write: a pod does not
// know its node's zone — balance from the locality the registry gives
// their workload, as Istio does: the locality of the endpoint at their
// address, else their istio-locality label. A client the registry does
// not know and that has no label balances from nowhere (every locality at
// priority 0).
func TestProxylessLocalityFromTheRegistry(t *testing.T) {
	b := xdstest.StartCountingBackends(t, "r1", "r2")
	f := newFixture(t, nil)
	const policy = "{outlierDetection: {consecutive5xxErrors: 5, interval: 10s}}"
	in := localityMesh(t, b, policy, "r1", "r2")
	// The clients' own workloads: 10.77.0.1 in r2, 10.77.0.2 in no locality.
	in.Objects = append(in.Objects, pushctxtest.Decode(t, `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: callers, namespace: demo}
spec:
  hosts: [callers.demo.svc.cluster.local]
  location: MESH_INTERNAL
  ports: [{number: 8080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.77.0.1, locality: r2/z1}, {address: 10.77.0.2}]
`)...)
	f.set(t, "m", in)
	fromEndpoint := newLocalityClientMeta(t, f, b, "registry-r2", "", map[string]any{"INSTANCE_IPS": "10.77.0.1"})
	if got := fromEndpoint.calls(20); got["r2"] != 20 {
		t.Errorf("client whose endpoint is in r2: served by %v, want r2 only", got)
	}
	fromLabel := newLocalityClientMeta(t, f, b, "label-r1", "", map[string]any{
		"INSTANCE_IPS": "10.77.0.2", "LABELS": map[string]any{"istio-locality": "r1.z1"}})
	if got := fromLabel.calls(20); got["r1"] != 20 {
		t.Errorf("client labelled istio-locality=r1.z1: served by %v, want r1 only", got)
	}
	// The registry's locality wins over the node's, as in Istio.
	overNode := newLocalityClientMeta(t, f, b, "registry-over-node", "r1/z1", map[string]any{"INSTANCE_IPS": "10.77.0.1"})
	if got := overNode.calls(20); got["r2"] != 20 {
		t.Errorf("client whose endpoint is in r2 and node says r1: served by %v, want r2 only", got)
	}
	// Both localities serve it: calls reach each once its connection is
	// up (a client picks among the backends it is connected to).
	nowhere := newLocalityClientMeta(t, f, b, "nowhere", "", map[string]any{"INSTANCE_IPS": "10.77.0.2"})
	got := map[string]int{}
	testwait.For(t, waitFor, func() error {
		got[nowhere.call()]++
		if got["r1"] == 0 || got["r2"] == 0 {
			return fmt.Errorf("client of no locality: served by %v, want both localities", got)
		}
		return nil
	})
}
