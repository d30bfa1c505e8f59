package cache_test

import (
	"fmt"
	"strings"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// gatewayMoveBench returns a step that moves net-b's east-west gateway (a
// WorkloadEntry labelled as one) between two addresses and pushes the
// result: the mesh's snapshot is rebuilt (incrementally), diffed with the
// previous one, and the resources of sidecars on net-a in `namespaces`
// namespaces are generated for the new State. Each of `services` services
// has one endpoint on net-a and one on net-b. Before returning it checks,
// once, that a move is an endpoint-only change of every service that
// updates the sidecars' EDS to the new gateway address and reuses their
// clusters. With full, each State claims a config change (generation
// from scratch): what the fast path saves.
func gatewayMoveBench(tb testing.TB, services, namespaces int, full bool) (step func()) {
	tb.Helper()
	var y strings.Builder
	for i := range services {
		fmt.Fprintf(&y, `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: svc-%[1]d, namespace: ns-%[2]d}
spec:
  hosts: [svc-%[1]d.ns-%[2]d.svc.cluster.local]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 8080, name: http, protocol: HTTP}]
  endpoints:
  - {address: 10.1.%[3]d.%[4]d, network: net-a, labels: {security.istio.io/tlsMode: istio}}
  - {address: 10.2.%[3]d.%[4]d, network: net-b, labels: {security.istio.io/tlsMode: istio}}
`, i, i%10, i/250, i%250+1)
	}
	base, errs := meshconfig.DecodeYAML([]byte(y.String()), "bench.yaml")
	if len(errs) > 0 {
		tb.Fatal(errs)
	}
	var gateways [2]*meshconfig.Object
	for i, addr := range []string{"192.0.2.1", "192.0.2.2"} {
		objs, errs := meshconfig.DecodeYAML([]byte("apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: eastwest, namespace: istio-system, labels: {topology.istio.io/network: net-b, networking.istio.io/gatewayPort: \"15443\"}}\nspec: {address: "+addr+"}\n"), "gw.yaml")
		if len(errs) > 0 {
			tb.Fatal(errs)
		}
		gateways[i] = objs[0]
	}
	input := func(gw int) []mesh.ClusterInput {
		return []mesh.ClusterInput{{Name: "c1", Connected: true, Synced: true, Objects: append(base[:len(base):len(base)], gateways[gw])}}
	}
	keys := make([]proxy.Key, namespaces)
	for i := range keys {
		keys[i] = proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: fmt.Sprintf("ns-%d", i), IPs: fmt.Sprintf("10.1.255.%d", i+1), Network: "net-a"}
	}
	first, move := alternate(input, keys, mesh.DiffSnapshots)
	before := first.ForProxy(keys[0])
	after := move()
	if d := after.State.Diff; d.Config || len(d.Hosts) != services {
		tb.Fatalf("a gateway move: diff config %v, %d hosts; want an endpoint change of all %d services", d.Config, len(d.Hosts), services)
	}
	res := after.ForProxy(keys[0])
	const cluster = "outbound|8080||svc-0.ns-0.svc.cluster.local"
	cla := &endpointv3.ClusterLoadAssignment{}
	if p := res.Resources[typeurl.Endpoint][cluster]; p == nil || p.Any.UnmarshalTo(cla) != nil {
		tb.Fatalf("no assignment %s after the move", cluster)
	}
	var addrs []string
	for _, l := range cla.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			addrs = append(addrs, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
		}
	}
	if strings.Join(addrs, " ") != "10.1.0.1 192.0.2.2" {
		tb.Fatalf("EDS after the move: %v, want the net-a endpoint and the gateway's new address", addrs)
	}
	if res.Resources[typeurl.Cluster][cluster] != before.Resources[typeurl.Cluster][cluster] {
		tb.Fatal("the move regenerated the clusters")
	}
	if full {
		// Each State claims a config change (after diffing, as the hub
		// does): generation from scratch.
		_, move = alternate(input, keys, func(prev, next *mesh.Snapshot) mesh.Diff {
			mesh.DiffSnapshots(prev, next)
			return mesh.Diff{Config: true}
		})
	}
	return func() { move() }
}

// BenchmarkGatewayMove measures the endpoint fast path when an east-west
// gateway's address changes: the snapshot rebuild, the diff, and the
// EDS of sidecars on the other network (one proxy key per namespace, 10),
// for 1,000 services with endpoints behind the gateway.
// The full case regenerates everything instead, for comparison.
func BenchmarkGatewayMove(b *testing.B) {
	for _, mode := range []string{"endpoints", "full"} {
		b.Run(mode+"/services=1000/keys=10", func(b *testing.B) {
			step := gatewayMoveBench(b, 1000, 10, mode == "full")
			b.ReportAllocs()
			for b.Loop() {
				step()
			}
		})
	}
}

// TestBenchmarkGatewayMoveRunsOnce is BenchmarkGatewayMove's test twin:
// it runs it once, small.
func TestBenchmarkGatewayMoveRunsOnce(t *testing.T) {
	for _, full := range []bool{false, true} {
		gatewayMoveBench(t, 20, 3, full)()
	}
}
