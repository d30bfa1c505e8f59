package mesh

import (
	"encoding/json"
	"testing"

	"github.com/navemesh/nave/shared/meshconfig"
)

func decode(t *testing.T, yaml string) []*meshconfig.Object {
	t.Helper()
	objs, errs := meshconfig.DecodeYAML([]byte(yaml), "test.yaml")
	if len(errs) > 0 {
		t.Fatal(errs[0])
	}
	return objs
}

func servicesJSON(t *testing.T, s *Snapshot) string {
	t.Helper()
	b, err := json.Marshal(s.Services)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const entries = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: a, namespace: ns}
spec:
  hosts: [a.example, shared.example]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.2}, {address: 10.0.0.1}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: sel, namespace: ns}
spec:
  hosts: [shared.example]
  ports: [{number: 81, name: http2, protocol: HTTP}]
  resolution: STATIC
  workloadSelector: {labels: {app: x}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: x, namespace: ns}
spec: {address: 10.0.1.1, labels: {app: x}}
`

const otherCluster = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: b, namespace: ns}
spec:
  hosts: [a.example]
  ports: [{number: 8080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.9.0.1}]
`

// TestBuilderMatchesBuild checks that a Builder reusing services between
// builds gives what a fresh Build gives, and never changes an earlier
// snapshot.
func TestBuilderMatchesBuild(t *testing.T) {
	c1 := decode(t, entries)
	c2 := decode(t, otherCluster)
	in1 := []ClusterInput{{Name: "c1", Synced: true, Objects: c1}, {Name: "c2", Synced: true, Objects: c2}}
	var b Builder
	s1 := b.Build("m", in1)
	if got, want := servicesJSON(t, s1), servicesJSON(t, Build("m", in1)); got != want {
		t.Fatalf("first build differs:\n%s\n%s", got, want)
	}
	before := servicesJSON(t, s1)
	if n := len(s1.Services["a.example"].Endpoints); n != 3 {
		t.Fatalf("a.example has %d endpoints, want 3 (two clusters merged)", n)
	}
	if n := len(s1.Services["shared.example"].Ports); n != 2 {
		t.Fatalf("shared.example has %d ports, want 2 (two entries merged)", n)
	}

	// The second cluster goes stale and its entry changes; the first
	// cluster's objects are the same pointers.
	c2b := decode(t, otherCluster+"  addresses: [240.0.0.1]\n")
	in2 := []ClusterInput{{Name: "c1", Synced: true, Objects: c1}, {Name: "c2", Stale: true, Objects: c2b}}
	s2 := b.Build("m", in2)
	if got, want := servicesJSON(t, s2), servicesJSON(t, Build("m", in2)); got != want {
		t.Fatalf("second build differs:\n%s\n%s", got, want)
	}
	if servicesJSON(t, s1) != before {
		t.Fatal("the second build changed the first snapshot")
	}
	// The first cluster alone: a.example is shared as is.
	in3 := []ClusterInput{{Name: "c1", Synced: true, Objects: c1}}
	s3 := b.Build("m", in3)
	if got, want := servicesJSON(t, s3), servicesJSON(t, Build("m", in3)); got != want {
		t.Fatalf("third build differs:\n%s\n%s", got, want)
	}
	if servicesJSON(t, s1) != before {
		t.Fatal("the third build changed the first snapshot")
	}
}
