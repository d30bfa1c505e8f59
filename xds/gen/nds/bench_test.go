package nds_test

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/shared/meshconfig"
	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/gen/nds"
	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// hostsMesh is a two-cluster mesh of n hosts: two thirds Kubernetes
// Services (in c1, in c2, or in both, with a cluster IP each), one third
// ServiceEntries without addresses (auto-allocated), over 100 namespaces.
func hostsMesh(tb testing.TB, n int) *mesh.Snapshot {
	tb.Helper()
	seKind, err := meshconfig.KindFor("networking.istio.io/v1", "ServiceEntry")
	if err != nil {
		tb.Fatal(err)
	}
	var c1, c2 []*meshconfig.Object
	for i := range n {
		ns := fmt.Sprintf("ns-%d", i%100)
		name := fmt.Sprintf("svc-%d", i)
		if i%3 == 2 {
			o := &meshconfig.Object{Kind: seKind, Name: name, Namespace: ns, Spec: &networking.ServiceEntry{
				Hosts: []string{name + ".example.com"}, Resolution: networking.ServiceEntry_DNS, Location: networking.ServiceEntry_MESH_EXTERNAL,
				Ports: []*networking.ServicePort{{Number: 443, Name: "tls", Protocol: "TLS"}}}}
			o.Version = o.ComputeVersion()
			c1 = append(c1, o)
			continue
		}
		svc := func(ip string) *meshconfig.Object {
			return gentest.Registry(tb, "Service", name, ns, &meshconfigv1.Service{Hostname: name + "." + ns + ".svc.cluster.local",
				Addresses: []string{ip}, Ports: []*meshconfigv1.ServicePort{{Name: "http", Number: 80, Protocol: "HTTP"}}})
		}
		if i%4 != 3 {
			c1 = append(c1, svc(fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)))
		}
		if i%4 != 0 {
			c2 = append(c2, svc(fmt.Sprintf("10.200.%d.%d", i/250, i%250+1)))
		}
	}
	return mesh.Build("m", []mesh.ClusterInput{
		{Name: "c1", Synced: true, Connected: true, Objects: c1},
		{Name: "c2", Synced: true, Connected: true, Objects: c2},
	})
}

var captureKey = proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "ns-0", IPs: "10.1.0.1", Cluster: "c1", DNSCapture: true}

// BenchmarkNameTable measures generating and marshalling the name table
// of a DNS-capturing sidecar that sees every host, and reports its size.
func BenchmarkNameTable(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		snap := hostsMesh(b, n)
		b.Run(fmt.Sprintf("hosts=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var bytes, entries int
			for b.Loop() {
				nt, _ := nds.Generate(scope.New(snap, captureKey))
				m, err := proto.MarshalOptions{Deterministic: true}.Marshal(nt)
				if err != nil {
					b.Fatal(err)
				}
				bytes, entries = len(m), len(nt.GetTable())
			}
			b.ReportMetric(float64(bytes)/1024, "kb/msg")
			b.ReportMetric(float64(entries), "entries/msg")
		})
	}
}

// TestBenchmarkNameTableRunsOnce is BenchmarkNameTable's test twin: every
// host of a small mesh is in the table.
func TestBenchmarkNameTableRunsOnce(t *testing.T) {
	nt, problems := nds.Generate(scope.New(hostsMesh(t, 90), captureKey))
	if len(nt.GetTable()) != 90 || len(problems) != 0 {
		t.Fatalf("%d entries (want 90), problems %v", len(nt.GetTable()), problems)
	}
}
