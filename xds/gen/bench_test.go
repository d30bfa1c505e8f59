package gen

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/mesh"
)

var benchSizes = []int{100, 1000}

// BenchmarkBuild measures merging one cluster into a snapshot.
func BenchmarkBuild(b *testing.B) {
	for _, n := range benchSizes {
		in := gentest.DemoServices(b, n)
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
		snap := mesh.Build("m", gentest.DemoServices(b, n))
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
	snap := mesh.Build("m", gentest.DemoServices(t, 50))
	out := GRPC(snap)
	if n := len(out.Resources[typeurl.Cluster]); n != 150 {
		t.Fatalf("clusters = %d, want 150", n)
	}
	if len(out.Problems) != 0 {
		t.Fatalf("problems: %+v", out.Problems)
	}
}
