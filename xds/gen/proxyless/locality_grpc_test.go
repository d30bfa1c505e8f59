package proxyless_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	"github.com/navemesh/nave/internal/xdstest"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/mesh"
)

// TestGRPCLocality runs real grpc-go xDS clients against generated
// proxyless resources with two backends in two regions: distribute from
// "*" sends every call to the region it names; failoverPriority with
// explicit values keeps calls in the preferred region while its backend
// serves, and fails over to the other once it stops.
func TestGRPCLocality(t *testing.T) {
	const host = "loc.demo.svc.cluster.local"
	backends := xdstest.StartCountingBackends(t, "r1", "r2")
	var eps []string
	for i, region := range []string{"r1", "r2"} {
		eps = append(eps, backends.Endpoint(region, fmt.Sprintf(", locality: %s/z1, labels: {tier: t%d}", region, i+1)))
	}
	mesh := func(tp string) string { return xdstest.ServiceWithPolicy("loc", host, eps, tp) }
	// calls makes n calls on conn and returns the regions that served them.
	calls := func(t *testing.T, conn *grpc.ClientConn, n int) map[string]int {
		t.Helper()
		client := healthpb.NewHealthClient(conn)
		backends.Reset()
		for i := range n {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
			cancel()
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		return backends.Hits()
	}
	generate := func(t *testing.T, tp string) *gen.Output {
		out := gen.GRPC(gentest.Snapshot(t, map[string]string{"c1": mesh(tp)}))
		gentest.ValidateAll(t, out)
		if len(out.Problems) > 0 {
			t.Errorf("problems: %v", out.Problems)
		}
		return out
	}

	// The control: without locality settings both regions serve.
	t.Run("no setting", func(t *testing.T) {
		conn := grpcClient(t, generate(t, "{loadBalancer: {simple: ROUND_ROBIN}}"), "xds:///"+host+":7070")
		// The first calls may all go to the first backend whose
		// connection is up: call until both served, within a deadline.
		got := map[string]int{}
		for deadline := time.Now().Add(10 * time.Second); (got["r1"] == 0 || got["r2"] == 0) && time.Now().Before(deadline); {
			for r, n := range calls(t, conn, 5) {
				got[r] += n
			}
		}
		if got["r1"] == 0 || got["r2"] == 0 {
			t.Errorf("served by %v, want both regions", got)
		}
	})
	t.Run("distribute", func(t *testing.T) {
		out := generate(t, `{loadBalancer: {localityLbSetting: {distribute: [{from: "*", to: {"r2/*": 100}}]}}}`)
		conn := grpcClient(t, out, "xds:///"+host+":7070")
		if got := calls(t, conn, 20); got["r1"] != 0 || got["r2"] != 20 {
			t.Errorf("served by %v, want r2 only", got)
		}
	})
	t.Run("failoverPriority", func(t *testing.T) {
		out := generate(t, `{loadBalancer: {localityLbSetting: {failoverPriority: [topology.kubernetes.io/region=r2, tier=t2]}}, outlierDetection: {consecutive5xxErrors: 1}}`)
		cla, _ := gentest.ByName(out, typeurl.Endpoint, "outbound|7070||"+host).Message.(*endpointv3.ClusterLoadAssignment)
		for _, lle := range cla.GetEndpoints() {
			if want := map[string]uint32{"r1": 1, "r2": 0}[lle.GetLocality().GetRegion()]; lle.GetPriority() != want {
				t.Errorf("locality %v at priority %d, want %d", lle.GetLocality(), lle.GetPriority(), want)
			}
		}
		conn := grpcClient(t, out, "xds:///"+host+":7070")
		if got := calls(t, conn, 20); got["r1"] != 0 || got["r2"] != 20 {
			t.Errorf("served by %v, want r2 (priority 0) only", got)
		}
		backends.Srv["r2"].Stop()
		// A call already bound to r2's closing connection fails; wait
		// until the client has seen it close (it then takes r1, or the
		// calls below fail).
		client := healthpb.NewHealthClient(conn)
		for deadline := time.Now().Add(30 * time.Second); ; {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no call succeeded after r2 stopped: %v", err)
			}
		}
		if got := calls(t, conn, 10); got["r1"] != 10 {
			t.Errorf("after r2 stopped, served by %v, want r1 (priority 1)", got)
		}
	})
}

// TestGRPCLocalityResources: proxyless clients get localityLbSetting
// exactly as Envoy does, for their own locality and labels (GRPCFor):
// failover by region, failoverPriority compared with the client, and
// distribute from the client's locality; a client whose locality is
// unknown gets every locality at priority 0. Only what cannot apply for
// any client — failover without outlierDetection — is reported.
// GRPCClientReads says what of a client the assignments read, and
// GRPCClientEndpoints gives exactly the assignments GRPCFor changes.
func TestGRPCLocalityResources(t *testing.T) {
	snap := gentest.Snapshot(t, map[string]string{"c1": `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: loc, namespace: demo}
spec:
  hosts: [loc.demo.svc.cluster.local]
  location: MESH_INTERNAL
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  endpoints:
  - {address: 10.0.0.1, locality: r1/z1, labels: {v: a, tier: t1}}
  - {address: 10.0.0.2, locality: r2/z1, labels: {v: a, tier: t2}}
  - {address: 10.0.0.3, locality: r3/z1, labels: {v: a, tier: t3}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: loc, namespace: demo}
spec:
  host: loc.demo.svc.cluster.local
  trafficPolicy: {loadBalancer: {localityLbSetting: {failoverPriority: [topology.kubernetes.io/region=r1]}}}
  subsets:
  - {name: failover, labels: {v: a}, trafficPolicy: {loadBalancer: {localityLbSetting: {failover: [{from: r1, to: r3}]}}, outlierDetection: {consecutive5xxErrors: 1}}}
  - {name: client, labels: {v: a}, trafficPolicy: {loadBalancer: {localityLbSetting: {failoverPriority: [tier, topology.kubernetes.io/region]}}, outlierDetection: {consecutive5xxErrors: 1}}}
  - {name: from, labels: {v: a}, trafficPolicy: {loadBalancer: {localityLbSetting: {distribute: [{from: r1/*, to: {r2: 100}}]}}}}
  - {name: plain, labels: {v: a}}
`})
	const host = "loc.demo.svc.cluster.local"
	// localities returns "region:priority:weight" per locality of the
	// subset's assignment for client c.
	localities := func(out *gen.Output, subset string) map[string]string {
		cla, _ := gentest.ByName(out, typeurl.Endpoint, "outbound|7070|"+subset+"|"+host).Message.(*endpointv3.ClusterLoadAssignment)
		got := map[string]string{}
		for _, lle := range cla.GetEndpoints() {
			got[lle.GetLocality().GetRegion()] = fmt.Sprintf("%d:%d", lle.GetPriority(), lle.GetLoadBalancingWeight().GetValue())
		}
		return got
	}
	r1 := gen.GRPCClient{Locality: mesh.Locality{Region: "r1", Zone: "z1"}, Labels: map[string]string{"tier": "t2"}}
	r2 := gen.GRPCClient{Locality: mesh.Locality{Region: "r2", Zone: "z1"}, Labels: map[string]string{"tier": "t3"}}
	unknown, o1, o2 := gen.GRPC(snap), gen.GRPCFor(snap, r1), gen.GRPCFor(snap, r2)
	for _, out := range []*gen.Output{unknown, o1, o2} {
		gentest.ValidateAll(t, out)
	}
	flat := map[string]string{"r1": "0:1", "r2": "0:1", "r3": "0:1"}
	for _, c := range []struct {
		what   string
		out    *gen.Output
		subset string
		want   map[string]string
	}{
		{"top level (no outlierDetection)", o1, "", flat},
		{"failover, locality unknown", unknown, "failover", flat},
		{"failover from r1", o1, "failover", map[string]string{"r1": "0:1", "r3": "1:1", "r2": "2:1"}},
		{"failover from r2 (no entry: proximity)", o2, "failover", map[string]string{"r2": "0:1", "r1": "1:1", "r3": "1:1"}},
		{"failoverPriority, nothing known", unknown, "client", flat},
		{"failoverPriority tier t2, region r1", o1, "client", map[string]string{"r2": "0:1", "r1": "1:1", "r3": "1:1"}},
		{"failoverPriority tier t3, region r2", o2, "client", map[string]string{"r3": "0:1", "r1": "1:1", "r2": "1:1"}},
		{"distribute from r1", o1, "from", map[string]string{"r2": "0:100000"}},
		{"distribute, not from r2", o2, "from", flat},
		{"plain", o1, "plain", flat},
	} {
		if got := localities(c.out, c.subset); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: localities %v, want %v", c.what, got, c.want)
		}
	}
	for _, out := range []*gen.Output{unknown, o1, o2} {
		if len(out.Problems) != 1 || out.Problems[0].Resource != "c1:DestinationRule demo/loc" ||
			out.Problems[0].Field != "spec.trafficPolicy.loadBalancer.localityLbSetting" {
			t.Errorf("problems %v, want one: the top level's failover without outlierDetection", out.Problems)
		}
	}
	if got := gen.GRPCClientReads(snap); !got.Locality || got.Network || fmt.Sprint(got.Labels) != "[tier]" {
		t.Errorf("client reads %+v, want locality and label tier", got)
	}
	// GRPCClientEndpoints is exactly what GRPCFor changes.
	only := gen.GRPCClientEndpoints(snap, r1).Resources[typeurl.Endpoint]
	var names []string
	for _, r := range only {
		names = append(names, r.Name)
		if want := gentest.ByName(o1, typeurl.Endpoint, r.Name).Message; !proto.Equal(r.Message, want) {
			t.Errorf("%s: client endpoints %v, GRPCFor %v", r.Name, r.Message, want)
		}
	}
	// Every cluster with a localityLbSetting or outlierDetection (plain
	// inherits the top level's setting), as build.LocalityIndependent says.
	if want := "[outbound|7070|client|" + host + " outbound|7070|failover|" + host + " outbound|7070|from|" + host +
		" outbound|7070|plain|" + host + " outbound|7070||" + host + "]"; fmt.Sprint(names) != want {
		t.Errorf("client endpoints %v, want %s", names, want)
	}
}
