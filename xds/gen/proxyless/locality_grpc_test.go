package proxyless_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen"
	"github.com/navemesh/nave/xds/gen/gentest"
)

// TestGRPCLocality runs real grpc-go xDS clients against generated
// proxyless resources with two backends in two regions: distribute from
// "*" sends every call to the region it names; failoverPriority with
// explicit values keeps calls in the preferred region while its backend
// serves, and fails over to the other once it stops.
func TestGRPCLocality(t *testing.T) {
	const host = "loc.demo.svc.cluster.local"
	backends := startCountingBackends(t, "r1", "r2")
	var eps []string
	for i, region := range []string{"r1", "r2"} {
		eps = append(eps, backends.endpoint(region, fmt.Sprintf(", locality: %s/z1, labels: {tier: t%d}", region, i+1)))
	}
	mesh := func(tp string) string { return serviceWithPolicy("loc", host, eps, tp) }
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

// TestGRPCLocalityResources: what proxyless clients cannot have of
// localityLbSetting — settings that compare with the client's locality
// or labels (nave generates one set of resources for every client), and
// failover without outlierDetection — is reported naming the field and
// leaves every locality at priority 0 with its weight.
func TestGRPCLocalityResources(t *testing.T) {
	out := gen.GRPC(gentest.Snapshot(t, map[string]string{"c1": `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: loc, namespace: demo}
spec:
  hosts: [loc.demo.svc.cluster.local]
  location: MESH_INTERNAL
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.1, locality: r1/z1, labels: {v: a}}, {address: 10.0.0.2, locality: r2/z1, labels: {v: a}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: loc, namespace: demo}
spec:
  host: loc.demo.svc.cluster.local
  trafficPolicy: {loadBalancer: {localityLbSetting: {failoverPriority: [topology.kubernetes.io/region=r1]}}}
  subsets:
  - {name: failover, labels: {v: a}, trafficPolicy: {loadBalancer: {localityLbSetting: {failover: [{from: r1, to: r2}]}}, outlierDetection: {consecutive5xxErrors: 1}}}
  - {name: client, labels: {v: a}, trafficPolicy: {loadBalancer: {localityLbSetting: {failoverPriority: [topology.kubernetes.io/region]}}, outlierDetection: {consecutive5xxErrors: 1}}}
  - {name: from, labels: {v: a}, trafficPolicy: {loadBalancer: {localityLbSetting: {distribute: [{from: r1/*, to: {r2: 100}}]}}}}
`}))
	gentest.ValidateAll(t, out)
	for _, name := range []string{"", "failover", "client", "from"} {
		cla, _ := gentest.ByName(out, typeurl.Endpoint, "outbound|7070|"+name+"|loc.demo.svc.cluster.local").Message.(*endpointv3.ClusterLoadAssignment)
		if len(cla.GetEndpoints()) != 2 {
			t.Errorf("%q: localities %v, want both", name, cla.GetEndpoints())
		}
		for _, lle := range cla.GetEndpoints() {
			if lle.GetPriority() != 0 || lle.GetLoadBalancingWeight().GetValue() != 1 {
				t.Errorf("%q: locality %v at priority %d weight %d, want 0 and 1", name, lle.GetLocality(), lle.GetPriority(), lle.GetLoadBalancingWeight().GetValue())
			}
		}
	}
	for _, want := range []string{
		"spec.trafficPolicy.loadBalancer.localityLbSetting",
		"spec.subsets[0].trafficPolicy.loadBalancer.localityLbSetting.failover",
		"spec.subsets[1].trafficPolicy.loadBalancer.localityLbSetting.failoverPriority",
		"spec.subsets[2].trafficPolicy.loadBalancer.localityLbSetting.distribute",
	} {
		found := false
		for _, p := range out.Problems {
			found = found || (p.Resource == "c1:DestinationRule demo/loc" && p.Field == want)
		}
		if !found {
			t.Errorf("no problem %s in %v", want, out.Problems)
		}
	}
}
