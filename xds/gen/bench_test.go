package gen

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/mesh"
)

// benchConfig is n ServiceEntries with one gRPC port, 3 endpoints in two
// localities, a DestinationRule with two subsets and a VirtualService with
// a header route and a weighted split each: the shape of the demo, n times.
func benchConfig(tb testing.TB, n int) []mesh.ClusterInput {
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

var benchSizes = []int{100, 1000}

// BenchmarkBuild measures merging one cluster into a snapshot.
func BenchmarkBuild(b *testing.B) {
	for _, n := range benchSizes {
		in := benchConfig(b, n)
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				mesh.Build("m", in)
			}
		})
	}
}

// BenchmarkGRPC measures generating and marshalling every proxyless
// resource of a mesh, per type.
func BenchmarkGRPC(b *testing.B) {
	for _, n := range benchSizes {
		snap := mesh.Build("m", benchConfig(b, n))
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var bytes, resources int
			for b.Loop() {
				out := GRPC(snap)
				bytes, resources = 0, 0
				for _, rs := range out.Resources {
					for _, r := range rs {
						m, err := proto.Marshal(r.Message)
						if err != nil {
							b.Fatal(err)
						}
						bytes += len(m)
						resources++
					}
				}
			}
			b.ReportMetric(float64(bytes)/1024, "kb/msg")
			b.ReportMetric(float64(resources), "resources/msg")
		})
	}
}

// TestBenchmarksRunOnce is the test twin of the benchmarks above: it runs
// each once so that a benchmark can never rot.
func TestBenchmarksRunOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("benchmarks are exercised in the full run")
	}
	snap := mesh.Build("m", benchConfig(t, 50))
	out := GRPC(snap)
	if n := len(out.Resources[typeurl.Cluster]); n != 150 {
		t.Fatalf("clusters = %d, want 150", n)
	}
	if len(out.Problems) != 0 {
		t.Fatalf("problems: %+v", out.Problems)
	}
}
