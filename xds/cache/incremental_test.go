package cache_test

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/navemesh/nave/internal/metrictest"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/cache"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
)

// world is a mesh config the test mutates one object at a time; unchanged
// objects keep their identity, as ingest keeps them.
type world struct {
	t    *testing.T
	objs map[string]*meshconfig.Object // by a test-chosen key
}

func (w *world) put(key, y string) {
	w.t.Helper()
	objs, errs := meshconfig.DecodeYAML([]byte(y), key+".yaml")
	if len(errs) > 0 || len(objs) != 1 {
		w.t.Fatalf("decode %s: %v", key, errs)
	}
	w.objs[key] = objs[0]
}

func (w *world) list() []*meshconfig.Object {
	keys := make([]string, 0, len(w.objs))
	for k := range w.objs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]*meshconfig.Object, 0, len(keys))
	for _, k := range keys {
		out = append(out, w.objs[k])
	}
	return out
}

// dnsEntry is the ServiceEntry of api.example.com:443 (TLS, resolution
// DNS, outside the mesh) with one endpoint, address (a host name).
func dnsEntry(address string) string {
	return `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ext, namespace: shop}
spec:
  hosts: [api.example.com]
  ports: [{number: 443, name: tls, protocol: TLS}]
  resolution: DNS
  location: MESH_EXTERNAL
  endpoints: [{address: ` + address + `}]
`
}

func workloadEntry(name, ns, app, addr, version, zone string, port, weight int) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: %s, namespace: %s}
spec: {address: %s, ports: {http: %d}, labels: {app: %s, version: %s}, locality: region-1/%s, weight: %d}
`, name, ns, addr, port, app, version, zone, weight)
}

// TestIncrementalGenerationMatchesFromScratch applies a random sequence of
// endpoint-only and config changes and, with Verify on, has every
// incremental generation compared with one from scratch, for sidecars in
// two namespaces (one whose own address is a changing endpoint, one that
// captures DNS), a gateway, proxyless clients (of unknown locality, and in
// each zone), and the name tables of the Envoy keys.
func TestIncrementalGenerationMatchesFromScratch(t *testing.T) {
	w := &world{t: t, objs: map[string]*meshconfig.Object{}}
	apps := []struct{ name, ns string }{{"reviews", "shop"}, {"ratings", "shop"}, {"web", "front"}}
	// Upstream TLS per app (proxyless: ISTIO_MUTUAL clusters carry TLS,
	// SIMPLE ones are left out with their endpoints): reviews mesh mTLS,
	// ratings SIMPLE for subset v2 only, web none.
	// web's outlierDetection turns on failover by proximity (per client
	// locality, for proxyless clients too).
	tls := map[string]string{"reviews": ", tls: {mode: ISTIO_MUTUAL}", "web": ", outlierDetection: {consecutive5xxErrors: 1}"}
	subsetTLS := map[string]string{"ratings": ", trafficPolicy: {tls: {mode: SIMPLE}}"}
	for _, a := range apps {
		w.put("se-"+a.name, fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  hosts: [%[1]s.%[2]s.svc.cluster.local]
  ports: [{number: 9080, name: http, protocol: HTTP}]
  resolution: STATIC
  workloadSelector: {labels: {app: %[1]s}}
`, a.name, a.ns))
		w.put("dr-"+a.name, fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  host: %[1]s.%[2]s.svc.cluster.local
  subsets: [{name: v1, labels: {version: v1}}, {name: v2, labels: {version: v2}%[4]s}]
  trafficPolicy: {loadBalancer: {localityLbSetting: {distribute: [{from: region-1/zone-a/*, to: {"region-1/zone-a/*": 80, "region-1/zone-b/*": 20}}]}}%[3]s}
`, a.name, a.ns, tls[a.name], subsetTLS[a.name]))
	}
	w.put("se-dns", dnsEntry("a.example.com"))
	w.put("gw", `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: public, namespace: front}
spec:
  selector: {istio: ingressgateway}
  servers: [{port: {number: 8080, name: http, protocol: HTTP}, hosts: [shop.example.com]}]
`)
	vs := func(w1 int) string {
		return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: shop}
spec:
  hosts: [reviews.shop.svc.cluster.local, shop.example.com]
  gateways: [mesh, front/public]
  http: [{route: [{destination: {host: reviews.shop.svc.cluster.local, subset: v1}, weight: %d}, {destination: {host: reviews.shop.svc.cluster.local, subset: v2}, weight: %d}]}]
`, w1, 100-w1)
	}
	w.put("vs", vs(50))
	// The sidecar key "own" has address 10.0.0.1, an endpoint of web.
	addrs := []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"}
	for i, a := range apps {
		for j := range 2 {
			w.put(fmt.Sprintf("we-%s-%d", a.name, j), workloadEntry(fmt.Sprintf("%s-%d", a.name, j), a.ns, a.name, addrs[(i+j)%len(addrs)], fmt.Sprintf("v%d", j+1), "zone-a", 8000+j, 1))
		}
	}

	reg := prometheus.NewRegistry()
	src := pushctxtest.NewSource()
	m, c := start(t, src, cache.Options{Verify: true, Registerer: reg})

	keys := []proxy.Key{
		{Type: proxy.Sidecar, Mesh: "m", Namespace: "front", Labels: "app=web", IPs: "10.0.0.1"},
		{Type: proxy.Sidecar, Mesh: "m", Namespace: "shop", Labels: "app=client", IPs: "10.9.0.1", Locality: mesh.Locality{Region: "region-1", Zone: "zone-a"}},
		{Type: proxy.Router, Mesh: "m", Namespace: "front", Labels: "istio=ingressgateway", IPs: "10.9.0.2"},
		// Capturing DNS: the services' auto-allocated addresses in its
		// listeners, routes and name table.
		{Type: proxy.Sidecar, Mesh: "m", Namespace: "shop", Labels: "app=client", IPs: "10.9.0.3", Cluster: "c1", DNSCapture: true},
	}
	// Proxyless clients in both zones (the distribute rules and web's
	// failover read their locality).
	grpcKeys := []proxy.Key{
		{Type: proxy.GRPC, Mesh: "m", Locality: mesh.Locality{Region: "region-1", Zone: "zone-a"}},
		{Type: proxy.GRPC, Mesh: "m", Locality: mesh.Locality{Region: "region-1", Zone: "zone-b"}},
	}
	var last *cache.Entry
	publish := func() *cache.Entry {
		t.Helper()
		_, changed := m.Current("m")
		src.Set("m", pushctxtest.Cluster("c1", true, w.list()))
		m.Notify("m")
		pushctxtest.Await(t, changed, "a new push context")
		st := current(c, m, "m")
		for _, k := range keys {
			st.ForProxy(k)
			st.NameTableFor(k)
		}
		st.Proxyless()
		for _, k := range grpcKeys {
			st.ProxylessFor(k)
		}
		last = st
		return st
	}
	st0 := publish()

	rng := rand.New(rand.NewPCG(1, 2))
	zones := []string{"zone-a", "zone-b"}
	endpointSteps := 0
	for range 60 {
		a := apps[rng.IntN(len(apps))]
		j := rng.IntN(2)
		switch rng.IntN(6) {
		case 0: // config: new route weights
			w.put("vs", vs(rng.IntN(101)))
		case 1: // an endpoint leaves
			delete(w.objs, fmt.Sprintf("we-%s-%d", a.name, j))
		case 2: // the DNS service's endpoints change (its cluster carries them inline)
			w.put("se-dns", dnsEntry(fmt.Sprintf("%c.example.com", 'a'+rng.IntN(3))))
		default: // an endpoint moves, changes port, weight or zone (or comes back)
			w.put(fmt.Sprintf("we-%s-%d", a.name, j), workloadEntry(fmt.Sprintf("%s-%d", a.name, j), a.ns, a.name,
				addrs[rng.IntN(len(addrs))], fmt.Sprintf("v%d", j+1), zones[rng.IntN(2)], 8000+rng.IntN(3), 1+rng.IntN(3)))
		}
		st := publish()
		if !st.State.Diff.Config && !st.State.Diff.Unchanged() {
			endpointSteps++
		}
	}
	for _, mm := range c.Mismatches() {
		t.Error(mm)
	}
	if endpointSteps == 0 {
		t.Fatal("no step was endpoint-only: the test does not exercise incremental generation")
	}
	if n := generations(t, reg, "endpoints"); n == 0 {
		t.Errorf("no generation reused earlier output (mode endpoints); %d endpoint-only steps", endpointSteps)
	}
	if st0 == last {
		t.Fatal("nothing was published")
	}
}

// TestEndpointChangeReusesClustersListenersRoutes checks what an
// endpoint-only change regenerates: the changed service's endpoints only.
func TestEndpointChangeReusesClustersListenersRoutes(t *testing.T) {
	w := &world{t: t, objs: map[string]*meshconfig.Object{}}
	for _, o := range pushctxtest.EchoConfig(t, 80, 20) {
		w.objs[o.Kind.Kind+"/"+o.Name] = o
	}
	src := pushctxtest.NewSource()
	m, c := start(t, src, cache.Options{Verify: true})
	publish := publisher(t, src, m, c, w)
	k := proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "demo", IPs: "10.9.0.1"}
	st1 := publish()
	r1 := st1.ForProxy(k)

	w.put("WorkloadEntry/echo-v2", `apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: echo-v2, namespace: demo}
spec: {address: 127.0.0.2, ports: {grpc: 17072}, labels: {app: echo, version: v2}}
`)
	st2 := publish()
	if st2.State.Diff.Config || !st2.State.Diff.Hosts["echo.demo.svc.cluster.local"] || !st2.State.Diff.Addresses["127.0.0.2"] {
		t.Fatalf("diff %+v, want only echo's endpoints changed", st2.State.Diff)
	}
	r2 := st2.ForProxy(k)
	for _, typeURL := range []string{typeurl.Cluster, typeurl.Listener, typeurl.Route} {
		for name, p := range r1.Resources[typeURL] {
			if r2.Resources[typeURL][name] != p {
				t.Errorf("%s %s was regenerated for an endpoint change", typeURL, name)
			}
		}
	}
	changed := 0
	for name, p := range r2.Resources[typeurl.Endpoint] {
		if r1.Resources[typeurl.Endpoint][name] != p {
			changed++
		}
	}
	// The service's cluster and its v2 subset changed; v1's did not.
	if changed != 2 {
		t.Errorf("%d endpoint assignments changed, want 2 (echo and echo v2)", changed)
	}
	if mm := c.Mismatches(); len(mm) > 0 {
		t.Errorf("mismatches: %v", mm)
	}
	// Nothing changed: the same result.
	st3 := publish()
	if !st3.State.Diff.Unchanged() || st3.ForProxy(k) != r2 {
		t.Errorf("an unchanged rebuild did not reuse the result (diff %+v)", st3.State.Diff)
	}
}

// generations reads nave_proxy_generations_total{mode}.
func generations(t *testing.T, reg *prometheus.Registry, mode string) float64 {
	t.Helper()
	return metrictest.Value(t, reg, "nave_proxy_generations_total", "mode", mode)
}
