package envoy

import (
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// memoConfig has what an EDS assignment can depend on: subsets from a
// mesh-wide DestinationRule and a namespace-local one with other labels,
// endpoints on two networks and two localities, and a service whose
// outlier detection turns on failover by proximity.
const memoConfig = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: demo}
spec:
  hosts: [echo.demo.svc.cluster.local]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  workloadSelector: {labels: {app: echo}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: near, namespace: demo}
spec:
  hosts: [near.demo.svc.cluster.local]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  workloadSelector: {labels: {app: near}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: e1, namespace: demo}
spec: {address: 10.0.0.1, network: n1, labels: {app: echo, version: v1}, locality: r1/z1}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: e2, namespace: demo}
spec: {address: 10.0.0.2, network: n2, labels: {app: echo, version: v2}, locality: r2/z2}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: n1, namespace: demo}
spec: {address: 10.0.1.1, labels: {app: near}, locality: r1/z1}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: n2, namespace: demo}
spec: {address: 10.0.1.2, labels: {app: near}, locality: r2/z2}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: demo}
spec:
  host: echo.demo.svc.cluster.local
  exportTo: ["*"]
  subsets:
  - {name: a, labels: {version: v1}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo-local, namespace: other}
spec:
  host: echo.demo.svc.cluster.local
  subsets:
  - {name: a, labels: {version: v2}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: near, namespace: demo}
spec:
  host: near.demo.svc.cluster.local
  trafficPolicy: {outlierDetection: {consecutive5xxErrors: 3, interval: 1s, baseEjectionTime: 30s}}
`

// TestSharedAssignmentsMatchFreshGeneration: proxies generated one after
// another on one snapshot (sharing memoized assignments) get exactly what
// each gets from a snapshot of its own (invariant 6: the memo key holds
// every input).
func TestSharedAssignmentsMatchFreshGeneration(t *testing.T) {
	var keys []proxy.Key
	for _, ns := range []string{"demo", "other"} {
		for _, nw := range []string{"", "n1", "n2"} {
			for _, loc := range []mesh.Locality{{}, {Region: "r1", Zone: "z1"}, {Region: "r2", Zone: "z2"}} {
				for _, istio := range []bool{false, true} {
					keys = append(keys, proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: ns, IPs: "10.9.0.1", Network: nw, Locality: loc, IstioBuild: istio})
				}
			}
		}
	}
	shared := gentest.Snapshot(t, map[string]string{"c1": memoConfig})
	for _, k := range keys {
		want := generate(gentest.Snapshot(t, map[string]string{"c1": memoConfig}), k).Resources[typeurl.Endpoint]
		have := generate(shared, k).Resources[typeurl.Endpoint]
		if len(have) != len(want) || len(want) == 0 {
			t.Fatalf("%+v: %d assignments on the shared snapshot, %d fresh", k, len(have), len(want))
		}
		for i := range want {
			if have[i].Name != want[i].Name || !proto.Equal(have[i].Message, want[i].Message) {
				t.Errorf("%+v: %s differs on the shared snapshot", k, want[i].Name)
			}
		}
	}
}

// TestAssignmentsSharedByBuild: proxies of one build share their
// locality-independent assignments (one message per cluster), and only
// Istio's build gets the endpoints' "istio" workload metadata.
func TestAssignmentsSharedByBuild(t *testing.T) {
	snap := gentest.Snapshot(t, map[string]string{"c1": memoConfig})
	key := func(ip string, istio bool) proxy.Key {
		return proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "demo", IPs: ip, IstioBuild: istio}
	}
	const name = "outbound|80||echo.demo.svc.cluster.local"
	assignment := func(k proxy.Key) *endpointv3.ClusterLoadAssignment {
		for _, r := range generate(snap, k).Resources[typeurl.Endpoint] {
			if r.Name == name {
				return r.Message.(*endpointv3.ClusterLoadAssignment)
			}
		}
		t.Fatalf("%+v: no assignment %s", k, name)
		return nil
	}
	upstream, upstream2 := assignment(key("10.9.0.1", false)), assignment(key("10.9.0.2", false))
	istio, istio2 := assignment(key("10.9.0.1", true)), assignment(key("10.9.0.2", true))
	if upstream != upstream2 || istio != istio2 {
		t.Errorf("proxies of one build do not share the assignment (upstream %t, Istio %t)", upstream == upstream2, istio == istio2)
	}
	workloads := func(cla *endpointv3.ClusterLoadAssignment) int {
		n := 0
		for _, l := range cla.GetEndpoints() {
			for _, ep := range l.GetLbEndpoints() {
				if ep.GetMetadata().GetFilterMetadata()[build.IstioMetadataKey] != nil {
					n++
				}
			}
		}
		return n
	}
	if n := workloads(upstream); n != 0 {
		t.Errorf("upstream Envoy: %d endpoints with istio metadata, want none", n)
	}
	if n := workloads(istio); n != 2 {
		t.Errorf("Istio's build: %d endpoints with istio metadata, want 2", n)
	}
}
