package load

import (
	"fmt"
	"slices"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen"
	"github.com/navemesh/nave/xds/gen/proxyless"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// The objects the workload builds directly are the ones a spoke would
// decode from the equivalent Istio YAML.
func TestWorkloadMatchesYAML(t *testing.T) {
	w, err := NewWorkload(WorkloadOptions{Services: 12, EndpointsPerCluster: 2})
	if err != nil {
		t.Fatal(err)
	}
	yaml := `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: svc-11, namespace: ns-1}
spec:
  hosts: [svc-11.ns-1.svc.cluster.local]
  ports: [{number: 80, name: http, protocol: HTTP, targetPort: 8080}]
  location: MESH_INTERNAL
  resolution: STATIC
  workloadSelector: {labels: {app: svc-11}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: svc-11-c2-1, namespace: ns-1}
spec:
  address: 10.0.0.70
  ports: {http: 8080}
  labels: {app: svc-11}
  locality: region-1/zone-2
`
	want, errs := meshconfig.DecodeYAML([]byte(yaml), "test.yaml")
	if len(errs) > 0 {
		t.Fatal(errs[0])
	}
	got := map[string]*meshconfig.Object{}
	for _, o := range w.Objects(1) {
		got[o.Kind.Kind+" "+o.Key()] = o
	}
	for _, o := range want {
		g := got[o.Kind.Kind+" "+o.Key()]
		if g == nil {
			t.Fatalf("the workload has no %s %s", o.Kind.Kind, o.Key())
		}
		if g.Version != o.Version || !proto.Equal(g.Spec, o.Spec) {
			t.Errorf("%s %s: built %v (version %s), YAML decodes to %v (version %s)", o.Kind.Kind, o.Key(), g.Spec, g.Version, o.Spec, o.Version)
		}
	}
	// 12 services, each with an entry and 2 endpoints per cluster, and
	// the first cluster's DestinationRule, Gateway and VirtualService.
	if n := w.Count(0); n != 12*3+3 {
		t.Errorf("cluster c1 has %d objects, want %d", n, 12*3+3)
	}
	before := w.Objects(2)
	mv, after := w.MoveEndpoint(3, 2, 1)
	if mv.Address != "10.64.0.1" || len(after) != len(before) {
		t.Fatalf("move %+v, %d objects (was %d)", mv, len(after), len(before))
	}
	changed := 0
	for i := range after {
		if after[i] != before[i] {
			changed++
			if we := after[i].Spec.(interface{ GetAddress() string }); we.GetAddress() != mv.Address || after[i].Name != "svc-3-c3-1" {
				t.Errorf("the move changed %s (address %s)", after[i].Key(), we.GetAddress())
			}
		}
	}
	if changed != 1 {
		t.Errorf("the move changed %d objects, want 1", changed)
	}
}

// snapshot builds the mesh the hub would from a small workload.
func snapshot(t *testing.T, w *Workload) *mesh.Snapshot {
	t.Helper()
	var in []mesh.ClusterInput
	for c, name := range w.Clusters {
		in = append(in, mesh.ClusterInput{Name: name, Connected: true, Synced: true, Objects: w.Objects(c)})
	}
	return mesh.Build("default", in)
}

// What the client reads from serialized resources with protowire (names,
// EDS names) and from the listeners and route configurations it decodes
// is what full decoding of the real generators' output says.
func TestWireReadsGeneratedResources(t *testing.T) {
	w, err := NewWorkload(WorkloadOptions{Services: 5, EndpointsPerCluster: 1})
	if err != nil {
		t.Fatal(err)
	}
	snap := snapshot(t, w)
	specs, err := Proxies(w, 3, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	d := newDeriver(newNames())
	ids := func(names ...string) []int32 {
		var out []int32
		for _, n := range names {
			out = append(out, d.names.idString(n))
		}
		slices.Sort(out)
		return out
	}
	sorted := func(v []int32) []int32 { v = slices.Clone(v); slices.Sort(v); return v }
	for _, sp := range specs {
		var out *gen.Output
		if sp.Kind == Proxyless {
			out = gen.GRPC(snap)
		} else {
			px, err := proxy.FromNode(sp.Node, "default")
			if err != nil {
				t.Fatal(err)
			}
			out = gen.Envoy(snap, px.Key())
		}
		eds := 0
		for _, r := range out.Resources[typeurl.Cluster] {
			b, err := proto.Marshal(r.Message)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(resourceName(b)); got != r.Name {
				t.Errorf("%s: resource name %q, want %q", sp.Kind, got, r.Name)
			}
			c := r.Message.(*clusterv3.Cluster)
			want := []int32(nil)
			if c.GetType() == clusterv3.Cluster_EDS {
				eds++
				n := c.GetEdsClusterConfig().GetServiceName()
				if n == "" {
					n = c.GetName()
				}
				want = ids(n)
			}
			if got := d.derive(typeCDS, b); !slices.Equal(got, want) {
				t.Errorf("%s: cluster %s: EDS names %v, want %v", sp.Kind, c.GetName(), got, want)
			}
		}
		if eds < w.Services {
			t.Errorf("%s: %d EDS clusters, want at least %d", sp.Kind, eds, w.Services)
		}
		var routes []int32
		for _, r := range out.Resources[typeurl.Listener] {
			b, _ := proto.Marshal(r.Message)
			if got := string(resourceName(b)); got != r.Name {
				t.Errorf("%s: listener name %q, want %q", sp.Kind, got, r.Name)
			}
			routes = append(routes, d.derive(typeLDS, b)...)
		}
		var wantRoutes []string
		for _, r := range out.Resources[typeurl.Route] {
			wantRoutes = append(wantRoutes, r.Name)
		}
		if len(wantRoutes) == 0 {
			t.Errorf("%s: no route configurations generated", sp.Kind)
		}
		if got := sorted(slices.Compact(sorted(routes))); !slices.Equal(got, ids(wantRoutes...)) {
			t.Errorf("%s: listeners name routes %v, want the route configurations %v", sp.Kind, got, ids(wantRoutes...))
		}
		if sp.Kind == Proxyless {
			for _, r := range out.Resources[typeurl.Route] {
				if r.Name != proxyless.ListenerName(w.Hostname(1), ServicePort) {
					continue
				}
				b, _ := proto.Marshal(r.Message)
				if got, want := sorted(d.derive(typeRDS, b)), ids(w.ClusterName(1)); !slices.Equal(got, want) {
					t.Errorf("route %s names clusters %v, want %v", r.Name, got, want)
				}
			}
		}
	}
}

func TestParseResponse(t *testing.T) {
	a1, _ := anypb.New(&clusterv3.Cluster{Name: "one"})
	a2, _ := anypb.New(&clusterv3.Cluster{Name: "two"})
	sotw := &discoveryv3.DiscoveryResponse{VersionInfo: "v1", TypeUrl: typeurl.Cluster, Nonce: "7", Resources: []*anypb.Any{a1, a2}}
	b, _ := proto.Marshal(sotw)
	var r rawResponse
	if err := parseResponse(b, false, &r); err != nil {
		t.Fatal(err)
	}
	if r.version != "v1" || r.typeURL != typeurl.Cluster || r.nonce != "7" || r.size != len(b) || len(r.resources) != 2 ||
		string(resourceName(r.resources[1].value)) != "two" {
		t.Errorf("state of the world: %+v", r)
	}
	delta := &discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: "s", TypeUrl: typeurl.Endpoint, Nonce: "8",
		Resources:        []*discoveryv3.Resource{{Name: "one", Version: "h1", Resource: a1}},
		RemovedResources: []string{"gone", "also-gone"}}
	b, _ = proto.Marshal(delta)
	if err := parseResponse(b, true, &r); err != nil {
		t.Fatal(err)
	}
	if r.version != "s" || r.typeURL != typeurl.Endpoint || r.nonce != "8" || len(r.resources) != 1 || string(r.resources[0].name) != "one" ||
		string(resourceName(r.resources[0].value)) != "one" || len(r.removed) != 2 || string(r.removed[1]) != "also-gone" {
		t.Errorf("delta: %+v", r)
	}
	if err := parseResponse([]byte{0x0a, 0x05, 'x'}, false, &r); err == nil {
		t.Error("a truncated message parsed")
	}
}

func TestNeedleMatchesOnlyThatAddress(t *testing.T) {
	w, err := NewWorkload(WorkloadOptions{Services: 1, EndpointsPerCluster: 1})
	if err != nil {
		t.Fatal(err)
	}
	snap := snapshot(t, w)
	out := gen.GRPC(snap)
	var cla []byte
	for _, r := range out.Resources[typeurl.Endpoint] {
		cla, _ = proto.Marshal(r.Message)
	}
	svc := snap.Services[w.Hostname(0)]
	if len(svc.Endpoints) != 3 {
		t.Fatalf("%d endpoints, want 3", len(svc.Endpoints))
	}
	for _, ep := range svc.Endpoints {
		if !containsNeedle(cla, ep.Address) {
			t.Errorf("the assignment's bytes lack %s", ep.Address)
		}
		if containsNeedle(cla, ep.Address[:len(ep.Address)-1]) {
			t.Errorf("a prefix of %s matched", ep.Address)
		}
	}
}

func containsNeedle(b []byte, address string) bool {
	n := needle(address)
	for i := 0; i+len(n) <= len(b); i++ {
		if string(b[i:i+len(n)]) == string(n) {
			return true
		}
	}
	return false
}

func TestBitset(t *testing.T) {
	var a, b bitset
	for _, i := range []int32{1, 64, 200} {
		a.set(i)
	}
	b.set(64)
	if a.count() != 3 || !a.has(200) || a.has(2) || a.minus(b) != 2 || b.minus(a) != 0 {
		t.Errorf("a=%v b=%v", a, b)
	}
	if !b.subsetOf(a, nil) || a.subsetOf(b, nil) || !a.subsetOf(b, bitset{1<<1 | 1, 0, 0, 1 << 8}) {
		t.Error("subsetOf")
	}
	c := slices.Clone(a)
	c.intersect(b)
	if !c.equal(b) || c.equal(a) {
		t.Errorf("intersect: %v", c)
	}
	var got []int32
	a.each(func(i int32) { got = append(got, i) })
	if fmt.Sprint(got) != "[1 64 200]" {
		t.Errorf("each: %v", got)
	}
}

func TestStats(t *testing.T) {
	var v []float64
	for i := 100; i >= 1; i-- {
		v = append(v, float64(i))
	}
	s := newStats(v)
	if s.N != 100 || s.P50 != 50 || s.P99 != 99 || s.Max != 100 || s.Mean != 50.5 {
		t.Errorf("%+v", s)
	}
	m := Median([]Result{{Latency: Stats{P99: 3}, Extra: map[string]float64{"x": 1}}, {Latency: Stats{P99: 1}, Extra: map[string]float64{"x": 5}},
		{Latency: Stats{P99: 2}, Extra: map[string]float64{"x": 2}}})
	if m.Latency.P99 != 2 || m.Extra["x"] != 2 || m.Runs != 3 {
		t.Errorf("median %+v", m)
	}
}
