package gentest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/mesh"
)

// DemoServices is n ServiceEntries with one gRPC port, 3 endpoints in two
// localities, a DestinationRule with two subsets and a VirtualService
// with a header route and a weighted split each: the shape of the demo, n
// times, in cluster "c1". Benchmarks and their test twins use it.
func DemoServices(tb testing.TB, n int) []mesh.ClusterInput {
	tb.Helper()
	var b strings.Builder
	for i := range n {
		h := fmt.Sprintf("svc-%d.ns-%d.svc.cluster.local", i, i%10)
		fmt.Fprintf(&b, `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: svc-%[1]d, namespace: ns-%[2]d}
spec:
  hosts: [%[3]s]
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  endpoints:
  - {address: 10.%[4]d.%[5]d.1, labels: {version: v1}, locality: r1/z1}
  - {address: 10.%[4]d.%[5]d.2, labels: {version: v1}, locality: r1/z2}
  - {address: 10.%[4]d.%[5]d.3, labels: {version: v2}, locality: r1/z2}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: svc-%[1]d, namespace: ns-%[2]d}
spec:
  host: %[3]s
  subsets: [{name: v1, labels: {version: v1}}, {name: v2, labels: {version: v2}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: svc-%[1]d, namespace: ns-%[2]d}
spec:
  hosts: [%[3]s]
  http:
  - match: [{headers: {x-user: {exact: beta}}}]
    route: [{destination: {host: %[3]s, subset: v2}}]
  - route:
    - {destination: {host: %[3]s, subset: v1}, weight: 90}
    - {destination: {host: %[3]s, subset: v2}, weight: 10}
    timeout: 2s
`, i, i%10, h, i/250, i%250)
	}
	objs, errs := meshconfig.DecodeYAML([]byte(b.String()), "bench.yaml")
	if len(errs) > 0 {
		tb.Fatal(errs[0])
	}
	return []mesh.ClusterInput{{Name: "c1", Synced: true, Connected: true, Objects: objs}}
}
