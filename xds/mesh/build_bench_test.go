package mesh

import (
	"fmt"
	"strings"
	"testing"

	"github.com/navemesh/nave/shared/meshconfig"
)

// selectorMesh is services ServiceEntries with workload selectors, each
// selecting endpoints WorkloadEntries (S1's shape of issue 6), in 10
// namespaces.
func selectorMesh(tb testing.TB, services, endpoints int) []*meshconfig.Object {
	var b strings.Builder
	for i := range services {
		ns := fmt.Sprint("ns-", i%10)
		fmt.Fprintf(&b, "---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: svc-%[1]d, namespace: %[2]s}\n"+
			"spec:\n  hosts: [svc-%[1]d.%[2]s.svc.cluster.local]\n  ports: [{number: 80, name: http, protocol: HTTP}]\n"+
			"  resolution: STATIC\n  workloadSelector: {labels: {app: svc-%[1]d}}\n", i, ns)
		writeEntries(&b, i, ns, endpoints)
	}
	objs, errs := meshconfig.DecodeYAML([]byte(b.String()), "mesh.yaml")
	if len(errs) > 0 {
		tb.Fatal(errs[0])
	}
	return objs
}

// writeEntries writes the endpoints WorkloadEntries of service i
// (app=svc-i) in namespace ns, as YAML documents.
func writeEntries(b *strings.Builder, i int, ns string, endpoints int) {
	for j := range endpoints {
		fmt.Fprintf(b, "---\napiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: svc-%[1]d-%[3]d, namespace: %[2]s}\n"+
			"spec: {address: 10.%[4]d.%[5]d.%[6]d, labels: {app: svc-%[1]d}, locality: region/zone-%[7]d}\n", i, ns, j, 1+j%3, i/250, i%250+1, j%3)
	}
}

// BenchmarkBuildEndpointChange rebuilds a snapshot after one
// WorkloadEntry changed, as each endpoint event does.
func BenchmarkBuildEndpointChange(b *testing.B) {
	for _, sz := range []struct{ services, endpoints int }{{100, 15}, {1000, 15}} {
		b.Run(fmt.Sprintf("services=%d/endpoints=%d", sz.services, sz.endpoints), func(b *testing.B) {
			objs := selectorMesh(b, sz.services, sz.endpoints)
			var builder Builder
			builder.Build("m", []ClusterInput{{Name: "c1", Synced: true, Connected: true, Objects: objs}})
			b.ResetTimer()
			for i := range b.N {
				// A new object for one WorkloadEntry, as ingest stores a change.
				k := 1 + i%(len(objs)-1)
				if objs[k].Kind.Kind == "ServiceEntry" {
					k++
				}
				c := *objs[k]
				objs[k] = &c
				builder.Build("m", []ClusterInput{{Name: "c1", Synced: true, Connected: true, Objects: objs}})
			}
		})
	}
}

// BenchmarkBuildUnchanged builds again an input holding the very objects
// of the last build, as an endpoint notification whose change the build
// before took along does.
func BenchmarkBuildUnchanged(b *testing.B) {
	objs := selectorMesh(b, 1000, 15)
	in := []ClusterInput{{Name: "c1", Synced: true, Connected: true, Objects: objs}}
	var builder Builder
	builder.Build("m", in)
	b.ReportAllocs()
	for b.Loop() {
		builder.Build("m", in)
	}
}

// TestBuildBenchmarkOnce is BenchmarkBuildEndpointChange's twin.
func TestBuildBenchmarkOnce(t *testing.T) {
	objs := selectorMesh(t, 5, 3)
	s := new(Builder).Build("m", []ClusterInput{{Name: "c1", Synced: true, Connected: true, Objects: objs}})
	if len(s.Services) != 5 || len(s.Services["svc-0.ns-0.svc.cluster.local"].Endpoints) != 3 {
		t.Fatalf("%d services; svc-0 has %d endpoints", len(s.Services), len(s.Services["svc-0.ns-0.svc.cluster.local"].Endpoints))
	}
}
