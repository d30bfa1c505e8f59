package mesh

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/shared/meshconfig"
	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
)

// registryObject is a registry object of kind ("Service" or "Workload")
// with spec, as a spoke's Kubernetes source pushes it.
func registryObject(tb testing.TB, kind, name, namespace string, labels map[string]string, spec proto.Message) *meshconfig.Object {
	tb.Helper()
	k, err := meshconfig.KindFor("nave.io/v1", kind)
	if err != nil {
		tb.Fatal(err)
	}
	o := &meshconfig.Object{Kind: k, Name: name, Namespace: namespace, Labels: labels, Spec: spec, Origin: "kubernetes"}
	o.Version = o.ComputeVersion()
	return o
}

// kubeService is the registry Service of a Kubernetes Service
// name.namespace with a cluster IP, selecting app=name, port http 80 to
// target port 8080.
func kubeService(tb testing.TB, name, namespace, clusterIP string) *meshconfig.Object {
	return registryObject(tb, "Service", name, namespace, nil, &meshconfigv1.Service{
		Hostname:  name + "." + namespace + ".svc.cluster.local",
		Addresses: []string{clusterIP},
		Selector:  map[string]string{"app": name},
		Ports:     []*meshconfigv1.ServicePort{{Name: "http", Number: 80, Protocol: "HTTP", TargetPort: 8080}},
	})
}

// serviceSelectMesh is services Kubernetes Services, each defined in
// clusters c1 and c2 (namespace sameness), each selecting endpoints
// WorkloadEntries of c1, in 10 namespaces: c1's objects, then c2's.
func serviceSelectMesh(tb testing.TB, services, endpoints int) (c1, c2 []*meshconfig.Object) {
	var b strings.Builder
	for i := range services {
		ns := fmt.Sprint("ns-", i%10)
		c1 = append(c1, kubeService(tb, fmt.Sprint("svc-", i), ns, fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)))
		c2 = append(c2, kubeService(tb, fmt.Sprint("svc-", i), ns, fmt.Sprintf("10.97.%d.%d", i/250, i%250+1)))
		writeEntries(&b, i, ns, endpoints)
	}
	objs, errs := meshconfig.DecodeYAML([]byte(b.String()), "mesh.yaml")
	if len(errs) > 0 {
		tb.Fatal(errs[0])
	}
	return append(c1, objs...), c2
}

// moveEntry replaces the WorkloadEntry at objs[k] by a new object at
// address 10.200.x.y (step numbers it), as ingest stores a change.
func moveEntry(objs []*meshconfig.Object, k, step int) {
	o := *objs[k]
	we := proto.Clone(o.Spec.(*networking.WorkloadEntry)).(*networking.WorkloadEntry)
	we.Address = fmt.Sprintf("10.200.%d.%d", step/250%250, step%250+1)
	o.Spec, o.Version = we, fmt.Sprint("moved-", step)
	objs[k] = &o
}

// BenchmarkBuildEntryMoveUnderService rebuilds a snapshot after one
// WorkloadEntry selected by a Kubernetes Service (defined in two
// clusters) moved to another address, as each such endpoint event does.
func BenchmarkBuildEntryMoveUnderService(b *testing.B) {
	for _, sz := range []struct{ services, endpoints int }{{100, 15}, {1000, 15}} {
		b.Run(fmt.Sprintf("services=%d/endpoints=%d", sz.services, sz.endpoints), func(b *testing.B) {
			c1, c2 := serviceSelectMesh(b, sz.services, sz.endpoints)
			in := func() []ClusterInput {
				return []ClusterInput{{Name: "c1", Synced: true, Connected: true, Objects: c1}, {Name: "c2", Synced: true, Connected: true, Objects: c2}}
			}
			var builder Builder
			builder.Build("m", in())
			b.ResetTimer()
			for i := range b.N {
				// Every WorkloadEntry in turn, each to a new address.
				moveEntry(c1, sz.services+i%(len(c1)-sz.services), i)
				builder.Build("m", in())
			}
		})
	}
}

// TestBuildEntryMoveUnderServiceOnce is
// BenchmarkBuildEntryMoveUnderService's twin: the moved address is what
// the Service's endpoints hold.
func TestBuildEntryMoveUnderServiceOnce(t *testing.T) {
	c1, c2 := serviceSelectMesh(t, 5, 3)
	in := func() []ClusterInput {
		return []ClusterInput{{Name: "c1", Synced: true, Connected: true, Objects: c1}, {Name: "c2", Synced: true, Connected: true, Objects: c2}}
	}
	var builder Builder
	builder.Build("m", in())
	moveEntry(c1, 5, 7)
	s := builder.Build("m", in())
	svc := s.Services["svc-0.ns-0.svc.cluster.local"]
	if svc == nil || len(svc.Endpoints) != 3 || !svc.hasAddress("10.200.0.8") {
		t.Fatalf("svc-0 after its first entry moved to 10.200.0.8: %+v", svc)
	}
}

func (svc *Service) hasAddress(a string) bool {
	for _, ep := range svc.Endpoints {
		if ep.Address == a {
			return true
		}
	}
	return false
}
