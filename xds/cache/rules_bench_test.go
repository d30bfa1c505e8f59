package cache_test

import (
	"fmt"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/cache"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
	"github.com/navemesh/nave/xds/pushctx"
)

// ruleEditBench returns a step that edits one DestinationRule (svc-0's
// load balancer, ROUND_ROBIN and LEAST_REQUEST in turn), S2's change, and
// pushes the result: the mesh's snapshot is rebuilt, diffed with the
// previous one, and the resources of one sidecar per namespace and a
// gateway are generated and marshalled for the new State. Each of
// `services` services (in 10 namespaces) has 5 endpoints, a
// VirtualService routes one host, and svc-0 alone has a rule. Before
// returning it checks, once, that an edit changes svc-0's cluster for
// every key.
func ruleEditBench(tb testing.TB, services, namespaces int) (step func()) {
	tb.Helper()
	var y strings.Builder
	for i := range services {
		fmt.Fprintf(&y, `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: svc-%[1]d, namespace: ns-%[2]d}
spec:
  hosts: [svc-%[1]d.ns-%[2]d.svc.cluster.local]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 8080, name: http, protocol: HTTP}]
  workloadSelector: {labels: {app: svc-%[1]d}}
`, i, i%10)
		for j := range 5 {
			fmt.Fprintf(&y, "---\napiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: svc-%[1]d-%[3]d, namespace: ns-%[2]d}\n"+
				"spec: {address: 10.%[3]d.%[4]d.%[5]d, labels: {app: svc-%[1]d}}\n", i, i%10, 1+j, i/250, i%250+1)
		}
	}
	y.WriteString(`---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: public, namespace: ns-0}
spec:
  selector: {istio: ingressgateway}
  servers: [{port: {number: 8080, name: http, protocol: HTTP}, hosts: [shop.example.com]}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: shop, namespace: ns-0}
spec:
  hosts: [shop.example.com]
  gateways: [public]
  http: [{route: [{destination: {host: svc-0.ns-0.svc.cluster.local}}]}]
`)
	base, errs := meshconfig.DecodeYAML([]byte(y.String()), "bench.yaml")
	if len(errs) > 0 {
		tb.Fatal(errs)
	}
	var rules [2]*meshconfig.Object
	for i, lb := range []string{"LEAST_REQUEST", "ROUND_ROBIN"} {
		objs, errs := meshconfig.DecodeYAML([]byte("apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: svc-0, namespace: ns-0}\n"+
			"spec:\n  host: svc-0.ns-0.svc.cluster.local\n  trafficPolicy: {loadBalancer: {simple: "+lb+"}}\n"), "dr.yaml")
		if len(errs) > 0 {
			tb.Fatal(errs)
		}
		rules[i] = objs[0]
	}
	input := func(r int) []mesh.ClusterInput {
		return []mesh.ClusterInput{{Name: "c1", Connected: true, Synced: true, Objects: append(base[:len(base):len(base)], rules[r])}}
	}
	keys := []proxy.Key{{Type: proxy.Router, Mesh: "m", Namespace: "ns-0", Labels: "istio=ingressgateway", IPs: "10.9.0.1"}}
	for i := range namespaces {
		keys = append(keys, proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: fmt.Sprintf("ns-%d", i), IPs: fmt.Sprintf("10.9.1.%d", i+1)})
	}
	_, edit := alternate(input, keys, mesh.DiffSnapshots)
	after := edit()
	const name = "outbound|8080||svc-0.ns-0.svc.cluster.local"
	for _, k := range keys {
		cl := &clusterv3.Cluster{}
		if p := after.ForProxy(k).Resources[typeurl.Cluster][name]; p == nil || p.Any.UnmarshalTo(cl) != nil || cl.GetLbPolicy() != clusterv3.Cluster_ROUND_ROBIN {
			tb.Fatalf("%s's cluster %s after the edit: %v, want ROUND_ROBIN", k.Namespace, name, cl.GetLbPolicy())
		}
	}
	return func() { edit() }
}

// BenchmarkRuleEdit measures a DestinationRule edit (S2's): the snapshot
// rebuild, the diff, and the generation of a gateway and of a sidecar
// per namespace (10), for 1,000 services.
func BenchmarkRuleEdit(b *testing.B) {
	b.Run("services=1000/keys=11", func(b *testing.B) {
		step := ruleEditBench(b, 1000, 10)
		b.ReportAllocs()
		for b.Loop() {
			step()
		}
	})
}

// TestBenchmarkRuleEditRunsOnce is BenchmarkRuleEdit's twin.
func TestBenchmarkRuleEditRunsOnce(t *testing.T) {
	ruleEditBench(t, 20, 2)()
}

// alternate builds input(0) with a new Builder and generates keys for it,
// and returns that State's Entry and a step that builds input(1),
// input(0), ... in turn with that Builder, makes a State of each snapshot
// with the Diff that diff gives from the previous one (mesh.DiffSnapshots,
// as the hub does), and generates keys for it on a Cache that keeps the
// mesh's results.
func alternate(input func(int) []mesh.ClusterInput, keys []proxy.Key, diff func(prev, next *mesh.Snapshot) mesh.Diff) (*cache.Entry, func() *cache.Entry) {
	b := new(mesh.Builder)
	c := cache.New(noPublisher{}, cache.Options{})
	prev := b.Build("m", input(0))
	version := uint64(1)
	e := c.Entry(&pushctx.State{Mesh: "m", Version: version, Snapshot: prev, Diff: mesh.Diff{Config: true}})
	for _, k := range keys {
		e.ForProxy(k)
	}
	i := 0
	return e, func() *cache.Entry {
		i = 1 - i
		next := b.Build("m", input(i))
		d := diff(prev, next)
		prev = next
		version++
		e := c.Entry(&pushctx.State{Mesh: "m", Version: version, Snapshot: next, Diff: d})
		for _, k := range keys {
			e.ForProxy(k)
		}
		return e
	}
}
