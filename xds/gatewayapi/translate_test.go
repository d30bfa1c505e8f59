package gatewayapi_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/gatewayapi"
	"github.com/navemesh/nave/xds/mesh"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func load(t testing.TB, path string) []*meshconfig.Object {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	objs, errs := meshconfig.DecodeYAML(data, path)
	if len(errs) > 0 {
		t.Fatal(errs[0])
	}
	return objs
}

// render prints what the translation put into a snapshot: the generated
// Istio objects, the statuses and the problems.
func render(t *testing.T, s *mesh.Snapshot) string {
	t.Helper()
	var b bytes.Buffer
	for _, list := range [][]*mesh.Config{s.Gateways, s.AllVirtualServices} {
		for _, c := range list {
			if c.Object.Annotations[gatewayapi.SourceAnnotation] == "" {
				continue
			}
			raw, err := protojson.Marshal(c.Object.Spec)
			if err != nil {
				t.Fatal(err)
			}
			var v any
			if err := json.Unmarshal(raw, &v); err != nil {
				t.Fatal(err)
			}
			js, _ := json.MarshalIndent(v, "", "  ")
			fmt.Fprintf(&b, "# %s (from %s)\n%s\n", c.Ref(), c.Object.Annotations[gatewayapi.SourceAnnotation], js)
		}
	}
	for _, cluster := range []string{"c1", "c2"} {
		for _, st := range s.GatewayAPIStatuses[cluster] {
			var v any
			if err := json.Unmarshal(st.Json, &v); err != nil {
				t.Fatal(err)
			}
			js, _ := json.MarshalIndent(v, "", "  ")
			fmt.Fprintf(&b, "# status %s:%s %s/%s\n%s\n", cluster, st.Kind, st.Namespace, st.Name, js)
		}
	}
	for _, p := range s.Problems {
		fmt.Fprintf(&b, "# problem %s %s: %s\n", p.Resource, p.Field, p.Reason)
	}
	return b.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != got {
		t.Errorf("%s differs (go test -update to accept):\n%s", path, diffLines(string(want), got))
	}
}

func diffLines(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			return fmt.Sprintf("line %d:\nwant %q\ngot  %q", i+1, a, b)
		}
	}
	return ""
}

func TestTranslate(t *testing.T) {
	objs := load(t, "testdata/translate.yaml")
	s := mesh.Build("m", []mesh.ClusterInput{{Name: "c1", Synced: true, Objects: objs}})
	golden(t, "translate.golden", render(t, s))
}

// TestUnchangedTranslationKeepsIdentity: a build whose Gateway API
// objects and services did not change (only endpoints did) reuses the
// generated objects, so the snapshot diff stays an endpoints-only change
// and no proxy regenerates its routes.
func TestUnchangedTranslationKeepsIdentity(t *testing.T) {
	objs := load(t, "testdata/translate.yaml")
	b := new(mesh.Builder)
	prev := b.Build("m", []mesh.ClusterInput{{Name: "c1", Synced: true, Objects: objs}})
	moved := load(t, "testdata/translate.yaml")
	var next []*meshconfig.Object
	for i, o := range objs {
		if o.Kind.Kind == "ServiceEntry" && o.Name == "db" {
			o = moved[i] // the same content, a new object: re-decoded
			se := o.Spec.(interface {
				GetEndpoints() []*networkingv1alpha3.WorkloadEntry
			})
			se.GetEndpoints()[0].Address = "10.0.0.3"
			o.Version = o.ComputeVersion()
		}
		next = append(next, o)
	}
	s := b.Build("m", []mesh.ClusterInput{{Name: "c1", Synced: true, Objects: next}})
	d := mesh.DiffSnapshots(prev, s)
	if d.Config || !d.Hosts["db.data.svc.cluster.local"] {
		t.Fatalf("diff %+v, want only the endpoints of db.data.svc.cluster.local", d)
	}
}

// TestStatusPerCluster: an object defined alike in two clusters gets the
// same status in both; a different definition that lost the merge is
// told so.
func TestStatusPerCluster(t *testing.T) {
	objs := load(t, "testdata/translate.yaml")
	route := `apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: greeter, namespace: apps}
spec:
  parentRefs: [{group: "", kind: Service, name: greeter}]
  rules: [{backendRefs: [{name: greeter-v2, port: 50051}]}]
`
	other, errs := meshconfig.DecodeYAML([]byte(route), "c2.yaml")
	if len(errs) > 0 {
		t.Fatal(errs[0])
	}
	var gc []*meshconfig.Object
	for _, o := range objs {
		if o.Kind.Kind == "GatewayClass" {
			gc = append(gc, o)
		}
	}
	s := mesh.Build("m", []mesh.ClusterInput{
		{Name: "c1", Synced: true, Objects: objs},
		{Name: "c2", Synced: true, Objects: append(gc, other...)},
	})
	find := func(cluster, kind, name string) string {
		for _, st := range s.GatewayAPIStatuses[cluster] {
			if st.Kind == kind && st.Name == name {
				return string(st.Json)
			}
		}
		return ""
	}
	if a, b := find("c1", "GatewayClass", "nave"), find("c2", "GatewayClass", "nave"); a == "" || a != b {
		t.Errorf("GatewayClass status c1 %s, c2 %s: want the same", a, b)
	}
	if got := find("c2", "GRPCRoute", "greeter"); !strings.Contains(got, `"reason":"Conflicted"`) || !strings.Contains(got, "cluster c1") {
		t.Errorf("c2's losing GRPCRoute status %s: want Conflicted naming c1", got)
	}
	if got := find("c1", "GRPCRoute", "greeter"); !strings.Contains(got, `"reason":"Accepted"`) {
		t.Errorf("c1's GRPCRoute status %s: want Accepted", got)
	}
}

// BenchmarkTranslate measures a full build of a mesh with n HTTPRoutes
// on one Gateway and n GRPCRoutes on Services (each with its own
// Service), against the same build without the Gateway API objects: the
// difference is the translation's cost per build.
func BenchmarkTranslate(b *testing.B) {
	for _, n := range []int{100, 1000} {
		objs := scaleObjects(b, n)
		var plain []*meshconfig.Object
		for _, o := range objs {
			if !o.Kind.GatewayAPI {
				plain = append(plain, o)
			}
		}
		for _, c := range []struct {
			name string
			objs []*meshconfig.Object
		}{{fmt.Sprintf("routes=%d/gatewayapi", n), objs}, {fmt.Sprintf("routes=%d/without", n), plain}} {
			b.Run(c.name, func(b *testing.B) {
				builder := new(mesh.Builder)
				in := []mesh.ClusterInput{{Name: "c1", Synced: true, Objects: c.objs}}
				builder.Build("m", in)
				b.ResetTimer()
				start := cpuTime()
				for b.Loop() {
					// Every build re-translates (a full build); the specs are
					// decoded once, unchanged routes' rules and the generated
					// objects reused.
					builder.Build("m", in)
				}
				// CPU time: on a shared machine the wall time is mostly waiting.
				b.ReportMetric(float64((cpuTime()-start).Microseconds())/1000/float64(b.N), "cpu-ms/op")
			})
		}
	}
}

// cpuTime is the process's CPU time so far (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestBenchmarkTranslate runs the benchmark once so it cannot rot.
func TestBenchmarkTranslate(t *testing.T) {
	objs := scaleObjects(t, 20)
	s := mesh.Build("m", []mesh.ClusterInput{{Name: "c1", Synced: true, Objects: objs}})
	if len(s.GatewayAPIStatuses["c1"]) != 2*20+2 {
		t.Fatalf("%d statuses, want %d", len(s.GatewayAPIStatuses["c1"]), 2*20+2)
	}
	for _, p := range s.Problems {
		t.Errorf("problem: %+v", p)
	}
	testing.Benchmark(func(b *testing.B) {
		builder := new(mesh.Builder)
		for b.Loop() {
			builder.Build("m", []mesh.ClusterInput{{Name: "c1", Synced: true, Objects: objs}})
		}
	})
}

// scaleObjects makes n services, an HTTPRoute on a Gateway and a
// GRPCRoute on the Service for each.
func scaleObjects(t testing.TB, n int) []*meshconfig.Object {
	var y strings.Builder
	y.WriteString(`apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: nave}
spec: {controllerName: nave.io/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge, namespace: apps}
spec:
  gatewayClassName: nave
  listeners: [{name: http, port: 80, protocol: HTTP}]
`)
	for i := range n {
		fmt.Fprintf(&y, `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: svc%[1]d, namespace: apps}
spec:
  hosts: [svc%[1]d.apps.svc.cluster.local]
  ports: [{number: 8080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.1.%[2]d.%[3]d}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r%[1]d, namespace: apps}
spec:
  parentRefs: [{name: edge}]
  hostnames: [svc%[1]d.example.com]
  rules:
  - matches: [{path: {type: PathPrefix, value: /api}, headers: [{name: x-v, value: "2"}]}]
    backendRefs: [{name: svc%[1]d, port: 8080}]
  - backendRefs: [{name: svc%[1]d, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: g%[1]d, namespace: apps}
spec:
  parentRefs: [{group: "", kind: Service, name: svc%[1]d, port: 8080}]
  rules:
  - matches: [{method: {service: pkg.Svc, method: Get}}]
    backendRefs: [{name: svc%[1]d, port: 8080, weight: 80}, {name: svc%[4]d, port: 8080, weight: 20}]
`, i, i/250, i%250+1, (i+1)%n)
	}
	objs, errs := meshconfig.DecodeYAML([]byte(y.String()), "scale.yaml")
	if len(errs) > 0 {
		t.Fatal(errs[0])
	}
	return objs
}

// TestReusedRulesFollowTheirServices: a route's rules are reused between
// builds only while the services they name answer the same; a backend
// Service that goes away is BackendNotFound at the next build, and back
// again when it returns.
func TestReusedRulesFollowTheirServices(t *testing.T) {
	objs := load(t, "testdata/translate.yaml")
	var without []*meshconfig.Object
	for _, o := range objs {
		if !(o.Kind.Kind == "ServiceEntry" && o.Name == "db") {
			without = append(without, o)
		}
	}
	reason := func(s *mesh.Snapshot) string {
		for _, st := range s.GatewayAPIStatuses["c1"] {
			if st.Kind == "TCPRoute" && st.Name == "db" {
				var rs struct {
					Parents []struct {
						Conditions []struct{ Type, Reason string }
					}
				}
				if err := json.Unmarshal(st.Json, &rs); err != nil {
					t.Fatal(err)
				}
				for _, c := range rs.Parents[0].Conditions {
					if c.Type == "ResolvedRefs" {
						return c.Reason
					}
				}
			}
		}
		return ""
	}
	b := new(mesh.Builder)
	for i, want := range []string{"ResolvedRefs", "BackendNotFound", "ResolvedRefs"} {
		in := objs
		if i == 1 {
			in = without
		}
		s := b.Build("m", []mesh.ClusterInput{{Name: "c1", Synced: true, Objects: in}})
		if got := reason(s); got != want {
			t.Fatalf("build %d: TCPRoute db ResolvedRefs reason %q, want %q", i, got, want)
		}
	}
}
