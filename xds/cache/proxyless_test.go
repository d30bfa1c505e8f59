package cache_test

import (
	"fmt"
	"strings"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/cache"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
	"github.com/navemesh/nave/xds/resource"
)

// localityWorld is a mesh with service loc (endpoints in regions r1 and
// r2, a DestinationRule with outlierDetection: failover by proximity, and
// subsets failing over by the client's tier label, failing over from
// region r1 to r2, distributing from r1) and service plain (no
// DestinationRule).
func localityWorld(t *testing.T) *world {
	w := &world{t: t, objs: map[string]*meshconfig.Object{}}
	for _, svc := range []string{"loc", "plain"} {
		w.put("se-"+svc, fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: %[1]s, namespace: demo}
spec:
  hosts: [%[1]s.demo.svc.cluster.local]
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  workloadSelector: {labels: {app: %[1]s}}
`, svc))
		for i, region := range []string{"r1", "r2"} {
			w.put(fmt.Sprintf("we-%s-%s", svc, region), locWorkload(svc, region, fmt.Sprintf("10.%d.0.%d", i+1, len(svc)), 7070))
		}
	}
	w.put("dr-loc", `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: loc, namespace: demo}
spec:
  host: loc.demo.svc.cluster.local
  trafficPolicy: {outlierDetection: {consecutive5xxErrors: 1}}
  subsets:
  - {name: tier, labels: {app: loc}, trafficPolicy: {loadBalancer: {localityLbSetting: {failoverPriority: [tier]}}}}
  - {name: failover, labels: {app: loc}, trafficPolicy: {loadBalancer: {localityLbSetting: {failover: [{from: r1, to: r2}]}}}}
  - {name: from, labels: {app: loc}, trafficPolicy: {loadBalancer: {localityLbSetting: {distribute: [{from: r1/*, to: {r2/*: 100}}]}}}}
`)
	return w
}

// locWorkload is a WorkloadEntry of app in region (zone z1, tier the
// region's name) at addr:port.
func locWorkload(app, region, addr string, port int) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: %[1]s-%[2]s, namespace: demo}
spec: {address: %[3]s, ports: {grpc: %[4]d}, labels: {app: %[1]s, tier: %[2]s}, locality: %[2]s/z1}
`, app, region, addr, port)
}

// priorities returns "region:priority" per locality of an assignment.
func priorities(t testing.TB, res *resource.ProxyResources, name string) string {
	t.Helper()
	p := res.Resources[typeurl.Endpoint][name]
	if p == nil {
		t.Fatalf("no assignment %s", name)
	}
	cla := &endpointv3.ClusterLoadAssignment{}
	if err := p.Any.UnmarshalTo(cla); err != nil {
		t.Fatal(err)
	}
	got := ""
	for _, lle := range cla.GetEndpoints() {
		got += fmt.Sprintf("%s:%d ", lle.GetLocality().GetRegion(), lle.GetPriority())
	}
	return got
}

const (
	locCluster   = "outbound|7070||loc.demo.svc.cluster.local"
	tierCluster  = "outbound|7070|tier|loc.demo.svc.cluster.local"
	plainCluster = "outbound|7070||plain.demo.svc.cluster.local"
)

// TestProxylessPerClientLocality: proxyless clients get their assignments
// per client key — their locality and the labels failoverPriority
// compares, nothing else: clients with the same key share one result
// (pointer-equal), clients in different regions get different
// priorities, assignments that do not depend on the client are shared
// with the mesh-wide result, a client of unknown locality gets the
// mesh-wide result, and a mesh without locality rules gives every client
// the mesh-wide result.
func TestProxylessPerClientLocality(t *testing.T) {
	w := localityWorld(t)
	src := pushctxtest.NewSource()
	m, c := start(t, src, cache.Options{Verify: true})
	publish := func() *cache.Entry {
		_, changed := m.Current("m")
		src.Set("m", pushctxtest.Cluster("c1", true, w.list()))
		m.Notify("m")
		pushctxtest.Await(t, changed, "a new push context")
		return current(c, m, "m")
	}
	st := publish()
	r1 := mesh.Locality{Region: "r1", Zone: "z1"}
	a := proxy.Key{Type: proxy.GRPC, Mesh: "m", Namespace: "demo", Locality: r1, Labels: "app=a\ntier=r1"}
	a2 := proxy.Key{Type: proxy.GRPC, Mesh: "m", Namespace: "other", Locality: r1, Labels: "app=b\ntier=r1"}
	b := proxy.Key{Type: proxy.GRPC, Mesh: "m", Namespace: "demo", Locality: mesh.Locality{Region: "r2", Zone: "z1"}, Labels: "tier=r1"}
	unknown := proxy.Key{Type: proxy.GRPC, Mesh: "m", Namespace: "demo", Labels: "app=a"}
	ra, ra2, rb := st.ProxylessFor(a), st.ProxylessFor(a2), st.ProxylessFor(b)
	if ra != ra2 {
		t.Error("clients with the same locality and tier got different results")
	}
	if ra == rb {
		t.Error("clients in different regions got the same result")
	}
	if got := st.ProxylessFor(unknown); got != st.Proxyless() {
		t.Error("a client of unknown locality (and a label nothing compares) did not get the mesh-wide result")
	}
	for _, c := range []struct {
		res  *resource.ProxyResources
		name string
		want string
	}{
		{ra, locCluster, "r1:0 r2:1 "},
		{rb, locCluster, "r2:0 r1:1 "},
		{st.Proxyless(), locCluster, "r1:0 r2:0 "},
		{ra, tierCluster, "r1:0 r2:1 "}, // both compare tier=r1
		{rb, tierCluster, "r1:0 r2:1 "},
	} {
		if got := priorities(t, c.res, c.name); got != c.want {
			t.Errorf("%s: priorities %s, want %s", c.name, got, c.want)
		}
	}
	// What does not depend on the client is shared, bytes and all.
	for _, r := range []*resource.ProxyResources{ra, rb} {
		if r.Resources[typeurl.Endpoint][plainCluster] != st.Proxyless().Resources[typeurl.Endpoint][plainCluster] {
			t.Error("the assignment of a cluster without locality rules is not shared with the mesh-wide result")
		}
		for _, typeURL := range []string{typeurl.Cluster, typeurl.Listener, typeurl.Route} {
			for name, p := range st.Proxyless().Resources[typeURL] {
				if r.Resources[typeURL][name] != p {
					t.Errorf("%s %s is not shared with the mesh-wide result", typeURL, name)
				}
			}
		}
	}
	// A client key differs from another only where the assignment does:
	// b with tier r2 compares differently for the tier subset.
	bt := b
	bt.Labels = "tier=r2"
	if got := priorities(t, st.ProxylessFor(bt), tierCluster); got != "r2:0 r1:1 " {
		t.Errorf("tier r2: priorities %s, want r2:0 r1:1", got)
	}

	// /debug/meshes lists AllProblems: nothing of localityLbSetting is
	// reported as ignored for proxyless clients any more.
	for _, p := range st.AllProblems() {
		if strings.Contains(p.Field, "localityLbSetting") {
			t.Errorf("problem reported: %+v", p)
		}
	}
	if got := priorities(t, ra, "outbound|7070|from|loc.demo.svc.cluster.local"); got != "r2:0 " {
		t.Errorf("distribute from r1 for a client in r1: %s, want r2 only", got)
	}
	if got := priorities(t, rb, "outbound|7070|from|loc.demo.svc.cluster.local"); got != "r2:0 r1:1 " {
		t.Errorf("distribute from r1 for a client in r2 (by proximity instead): %s, want r2:0 r1:1", got)
	}

	// Without locality rules every client shares the mesh-wide result.
	delete(w.objs, "dr-loc")
	st = publish()
	for _, k := range []proxy.Key{a, b, unknown} {
		if st.ProxylessFor(k) != st.Proxyless() {
			t.Errorf("key %+v: not the mesh-wide result in a mesh without locality rules", k)
		}
	}
	if mm := c.Mismatches(); len(mm) > 0 {
		t.Errorf("mismatches: %v", mm)
	}
}

// TestProxylessClientEndpointChange: when only endpoints change, each
// client key regenerates only the changed hosts' assignments (the rest,
// of every type, keep their identity), its result follows from the
// previous one (ChangesSince), and equals a generation from scratch
// (Verify).
func TestProxylessClientEndpointChange(t *testing.T) {
	w := localityWorld(t)
	src := pushctxtest.NewSource()
	m, c := start(t, src, cache.Options{Verify: true})
	publish := func() *cache.Entry {
		_, changed := m.Current("m")
		src.Set("m", pushctxtest.Cluster("c1", true, w.list()))
		m.Notify("m")
		pushctxtest.Await(t, changed, "a new push context")
		return current(c, m, "m")
	}
	keys := []proxy.Key{
		{Type: proxy.GRPC, Mesh: "m", Locality: mesh.Locality{Region: "r1", Zone: "z1"}},
		{Type: proxy.GRPC, Mesh: "m", Locality: mesh.Locality{Region: "r2", Zone: "z1"}},
	}
	st1 := publish()
	before := map[proxy.Key]*resource.ProxyResources{}
	for _, k := range keys {
		before[k] = st1.ProxylessFor(k)
	}

	// plain's r1 endpoint moves port: only plain's assignment changes.
	w.put("we-plain-r1", locWorkload("plain", "r1", "10.1.0.5", 7071))
	st2 := publish()
	if st2.State.Diff.Config || !st2.State.Diff.Hosts["plain.demo.svc.cluster.local"] {
		t.Fatalf("diff %+v, want only plain's endpoints changed", st2.State.Diff)
	}
	for _, k := range keys {
		r1, r2 := before[k], st2.ProxylessFor(k)
		for typeURL, byName := range r1.Resources {
			for name, p := range byName {
				if changed := r2.Resources[typeURL][name] != p; changed != (typeURL == typeurl.Endpoint && name == plainCluster) {
					t.Errorf("%s: %s %s changed: %v", k.Locality.Region, typeURL, name, changed)
				}
			}
		}
		ch, ok := r2.ChangesSince(r1.ID(), typeurl.Endpoint)
		if !ok || len(ch.Updated) != 1 || ch.Updated[0].Name != plainCluster || len(ch.Removed) != 0 {
			t.Errorf("%s: changes since the previous result %+v (known %v), want plain's assignment updated", k.Locality.Region, ch, ok)
		}
		before[k] = r2
	}
	if p1, p2 := st2.ProxylessFor(keys[0]).Resources[typeurl.Endpoint][plainCluster], st2.ProxylessFor(keys[1]).Resources[typeurl.Endpoint][plainCluster]; p1 != p2 || p1 != st2.Proxyless().Resources[typeurl.Endpoint][plainCluster] {
		t.Error("plain's regenerated assignment is not shared between client keys and the mesh-wide result")
	}

	// loc's r2 endpoint leaves: loc's assignments change per key, and
	// the r2 client's loc cluster now has r1 only, at priority 0.
	delete(w.objs, "we-loc-r2")
	st3 := publish()
	if st3.State.Diff.Config {
		t.Fatalf("diff %+v, want endpoints only", st3.State.Diff)
	}
	for _, k := range keys {
		r2, r3 := before[k], st3.ProxylessFor(k)
		for name, p := range r2.Resources[typeurl.Endpoint] {
			loc := strings.HasSuffix(name, "|loc.demo.svc.cluster.local")
			if changed := r3.Resources[typeurl.Endpoint][name] != p; changed != loc {
				t.Errorf("%s: assignment %s changed: %v", k.Locality.Region, name, changed)
			}
		}
		if got := priorities(t, r3, locCluster); got != "r1:0 " {
			t.Errorf("%s: priorities %s, want r1:0", k.Locality.Region, got)
		}
	}
	if mm := c.Mismatches(); len(mm) > 0 {
		t.Errorf("mismatches: %v", mm)
	}
	// With one locality left both keys' loc assignments are equal: one
	// Prepared (interned), bytes marshalled once.
	a, b := st3.ProxylessFor(keys[0]).Resources[typeurl.Endpoint][locCluster], st3.ProxylessFor(keys[1]).Resources[typeurl.Endpoint][locCluster]
	if a != b || !proto.Equal(a.Any, b.Any) {
		t.Errorf("equal assignments for both keys not shared (%p %p)", a, b)
	}
}
