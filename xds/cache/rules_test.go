package cache_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/cache"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
)

// rulesWorld is a mesh whose DestinationRules TestRuleAndRouteChangesMatchFromScratch
// edits: services in two namespaces (one STATIC with workload entries, one
// DNS, one of a wildcard host), VirtualServices routing to subsets over
// HTTP and TCP, a Sidecar that scopes one namespace's proxies, and an
// ingress and an AUTO_PASSTHROUGH gateway.
func rulesWorld(t *testing.T) *world {
	w := &world{t: t, objs: map[string]*meshconfig.Object{}}
	for i, s := range []struct{ name, ns, extra string }{
		{"reviews", "shop", "resolution: STATIC\n  workloadSelector: {labels: {app: reviews}}"},
		{"ratings", "shop", "resolution: STATIC\n  workloadSelector: {labels: {app: ratings}}"},
		{"web", "front", "resolution: STATIC\n  workloadSelector: {labels: {app: web}}"},
	} {
		w.put("se-"+s.name, fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  hosts: [%[1]s.%[2]s.svc.cluster.local]
  addresses: [240.240.0.%[4]d]
  ports: [{number: 9080, name: http, protocol: HTTP}, {number: 9090, name: tcp, protocol: TCP}]
  location: MESH_INTERNAL
  %[3]s
`, s.name, s.ns, s.extra, i+1))
		for j := range 2 {
			w.put(fmt.Sprintf("we-%s-%d", s.name, j), workloadEntry(fmt.Sprintf("%s-%d", s.name, j), s.ns, s.name,
				fmt.Sprintf("10.1.%d.%d", len(s.name), j+1), fmt.Sprintf("v%d", j+1), []string{"zone-a", "zone-b"}[j], 9080, 1))
		}
	}
	w.put("se-dns", dnsEntry("a.example.com, locality: region-1/zone-a"))
	w.put("se-wild", `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: wild, namespace: front}
spec:
  hosts: ["*.wild.example.com"]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: NONE
  location: MESH_EXTERNAL
`)
	w.put("vs-http", `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: shop}
spec:
  hosts: [reviews.shop.svc.cluster.local, shop.example.com]
  gateways: [mesh, front/public]
  http: [{route: [{destination: {host: reviews.shop.svc.cluster.local, subset: v1}, weight: 60}, {destination: {host: ratings.shop.svc.cluster.local, subset: v2}, weight: 40}]}]
`)
	w.put("vs-tcp", `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: web-tcp, namespace: front}
spec:
  hosts: [web.front.svc.cluster.local]
  tcp: [{match: [{port: 9090}], route: [{destination: {host: web.front.svc.cluster.local, port: {number: 9090}, subset: v2}}]}]
`)
	w.put("gw", `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: public, namespace: front}
spec:
  selector: {istio: ingressgateway}
  servers:
  - {port: {number: 8080, name: http, protocol: HTTP}, hosts: [shop.example.com]}
  - {port: {number: 8443, name: tls, protocol: TLS}, tls: {mode: PASSTHROUGH}, hosts: [secure.example.com]}
`)
	w.put("gw-ew", `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: eastwest, namespace: front}
spec:
  selector: {istio: eastwestgateway}
  servers: [{port: {number: 15443, name: tls, protocol: TLS}, tls: {mode: AUTO_PASSTHROUGH}, hosts: ["*.shop.svc.cluster.local"]}]
`)
	w.put("sidecar", `apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: front}
spec:
  egress: [{hosts: ["./*", "shop/reviews.shop.svc.cluster.local"]}]
`)
	return w
}

// ruleEdits draws DestinationRule edits: ruleEdits.next returns the
// world's key of a rule and its YAML ("" deletes it). Half the edits
// change only a rule's traffic policy (its subsets and exportTo stay),
// which is what reuses listeners and routes.
type ruleEdits struct {
	rng   *rand.Rand
	shape map[string]string // subsets and exportTo, per key
}

func (r *ruleEdits) next() (string, string) {
	rng := r.rng
	dr := func(name, ns, host, spec string) string {
		return fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: %s, namespace: %s}\nspec:\n  host: %s\n%s", name, ns, host, spec)
	}
	lbs := []string{"ROUND_ROBIN", "LEAST_REQUEST", "RANDOM", "PASSTHROUGH"}
	subsets := []string{
		"",
		"  subsets: [{name: v1, labels: {version: v1}}]\n",
		"  subsets: [{name: v1, labels: {version: v1}}, {name: v2, labels: {version: v2}, trafficPolicy: {tls: {mode: SIMPLE}}}]\n",
		"  subsets: [{name: v2, labels: {version: v2}, trafficPolicy: {loadBalancer: {consistentHash: {useSourceIp: true}}}}, {name: v3, labels: {version: v3}}]\n",
	}
	exportTo := []string{"", "  exportTo: [.]\n", "  exportTo: [front]\n", "  exportTo: ['~']\n"}
	policy := func() string {
		switch rng.IntN(6) {
		case 0:
			return "  trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-user}}}\n"
		case 1:
			return "  trafficPolicy: {outlierDetection: {consecutive5xxErrors: 2}, loadBalancer: {localityLbSetting: {failover: [{from: region-1, to: region-2}]}}}\n"
		case 2:
			return "  trafficPolicy: {portLevelSettings: [{port: {number: 9080}, loadBalancer: {consistentHash: {httpCookie: {name: c, ttl: 1s}}}}], tls: {mode: ISTIO_MUTUAL}}\n"
		default:
			return fmt.Sprintf("  trafficPolicy: {loadBalancer: {simple: %s}}\n", lbs[rng.IntN(len(lbs))])
		}
	}
	hosts := []struct{ key, name, ns, host string }{
		{"dr-reviews", "reviews", "shop", "reviews.shop.svc.cluster.local"},
		{"dr-ratings", "ratings", "shop", "ratings.shop.svc.cluster.local"},
		{"dr-web", "web", "front", "web.front.svc.cluster.local"},
		// In the proxy's namespace rather than the host's, and in the root
		// namespace: lookup order and exportTo decide.
		{"dr-reviews-front", "reviews-front", "front", "reviews.shop.svc.cluster.local"},
		{"dr-reviews-root", "reviews-root", mesh.DefaultRootNamespace, "reviews.shop.svc.cluster.local"},
		{"dr-dns", "ext", "shop", "api.example.com"},
		{"dr-wild", "wild", "front", `"*.wild.example.com"`},
		// A short host, completed in the rule's namespace.
		{"dr-ratings-short", "ratings-short", "shop", "ratings"},
	}
	h := hosts[rng.IntN(len(hosts))]
	if rng.IntN(6) == 0 {
		delete(r.shape, h.key)
		return h.key, ""
	}
	if _, ok := r.shape[h.key]; !ok || rng.IntN(2) == 0 {
		r.shape[h.key] = subsets[rng.IntN(len(subsets))] + exportTo[rng.IntN(len(exportTo))]
	}
	return h.key, dr(h.name, h.ns, h.host, policy()+r.shape[h.key])
}

// routeEdit draws a VirtualService edit: the world's key and the YAML
// ("" deletes it). HTTP routes change weights, subsets, source labels,
// hosts, gateways and exportTo; TCP and TLS routes come and go.
func routeEdit(rng *rand.Rand) (string, string) {
	subsets := []string{"v1", "v2", "v3"}
	switch rng.IntN(8) {
	case 6:
		return "vs-gw-tls", ""
	case 7: // TLS routes of a gateway's PASSTHROUGH server
		return "vs-gw-tls", fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: secure, namespace: front}
spec:
  hosts: [secure.example.com]
  gateways: [public]
  tls: [{match: [{port: 8443, sniHosts: [secure.example.com]}], route: [{destination: {host: %s, port: {number: 9090}}}]}]
`, []string{"web.front.svc.cluster.local", "ratings.shop.svc.cluster.local"}[rng.IntN(2)])
	case 0:
		return "vs-tcp", ""
	case 1:
		return "vs-tcp", fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: web-tcp, namespace: front}
spec:
  hosts: [web.front.svc.cluster.local]
  tcp: [{match: [{port: 9090}], route: [{destination: {host: %s, port: {number: 9090}, subset: %s}}]}]
`, []string{"web.front.svc.cluster.local", "ratings.shop.svc.cluster.local"}[rng.IntN(2)], subsets[rng.IntN(3)])
	case 2:
		return "vs-tls", fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ext-tls, namespace: shop}
spec:
  hosts: [api.example.com]
  exportTo: [%s]
  tls: [{match: [{port: 443, sniHosts: [api.example.com]}], route: [{destination: {host: ratings.shop.svc.cluster.local, port: {number: 9090}}}]}]
`, []string{"'*'", "."}[rng.IntN(2)])
	case 3:
		return "vs-tls", ""
	}
	hosts := []string{"[reviews.shop.svc.cluster.local, shop.example.com]", "[reviews.shop.svc.cluster.local]", "[ratings, shop.example.com]"}
	gateways := []string{"[mesh, front/public]", "[front/public]", "[mesh]"}
	match := []string{"", "match: [{sourceLabels: {app: client}}], ", "match: [{headers: {x-v: {exact: b}}}], "}
	w := 10 * rng.IntN(11)
	return "vs-http", fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: shop}
spec:
  hosts: %s
  gateways: %s
  exportTo: [%s]
  http: [{%sroute: [{destination: {host: reviews.shop.svc.cluster.local, subset: %s}, weight: %d}, {destination: {host: ratings.shop.svc.cluster.local, subset: %s}, weight: %d}]}, {route: [{destination: {host: web.front.svc.cluster.local}}]}]
`, hosts[rng.IntN(3)], gateways[rng.IntN(3)], []string{"'*'", ".", "front"}[rng.IntN(3)], match[rng.IntN(3)], subsets[rng.IntN(3)], w, subsets[rng.IntN(3)], 100-w)
}

// TestRuleAndRouteChangesMatchFromScratch edits DestinationRules at
// random (load balancer, consistent hash, locality, TLS, subsets added
// and removed, exportTo, rules in the proxy's, the host's and
// the root namespace, for STATIC, DNS and wildcard hosts, rules added and
// deleted) and VirtualServices (routeEdit), sometimes with an endpoint
// change in the same step, and with
// Verify on has every generation that reuses earlier output (mode rules)
// compared with one from scratch, for sidecars in both namespaces (one
// scoped by a Sidecar, one whose own address is an endpoint), an ingress
// gateway and an AUTO_PASSTHROUGH gateway, their name tables, and
// proxyless clients.
func TestRuleAndRouteChangesMatchFromScratch(t *testing.T) {
	w := rulesWorld(t)
	reg := prometheus.NewRegistry()
	src := pushctxtest.NewSource()
	m, c := start(t, src, cache.Options{Verify: true, Registerer: reg})
	publish := publisher(t, src, m, c, w)
	keys := []proxy.Key{
		{Type: proxy.Sidecar, Mesh: "m", Namespace: "front", Labels: "app=client", IPs: "10.9.0.1"},
		{Type: proxy.Sidecar, Mesh: "m", Namespace: "shop", Labels: "app=reviews", IPs: "10.1.7.1", Locality: mesh.Locality{Region: "region-1", Zone: "zone-a"}},
		{Type: proxy.Sidecar, Mesh: "m", Namespace: "other", Labels: "app=client", IPs: "10.9.0.3", Locality: mesh.Locality{Region: "region-1", Zone: "zone-b"}},
		{Type: proxy.Router, Mesh: "m", Namespace: "front", Labels: "istio=ingressgateway", IPs: "10.9.0.2"},
		{Type: proxy.Router, Mesh: "m", Namespace: "front", Labels: "istio=eastwestgateway", IPs: "10.9.0.4"},
		// Capturing DNS: auto-allocated addresses in its listeners and
		// name table.
		{Type: proxy.Sidecar, Mesh: "m", Namespace: "shop", Labels: "app=client", IPs: "10.9.0.5", DNSCapture: true},
	}
	grpcKeys := []proxy.Key{
		{Type: proxy.GRPC, Mesh: "m", Namespace: "shop", Locality: mesh.Locality{Region: "region-1", Zone: "zone-a"}},
	}
	use := func(st *cache.Entry) {
		for _, k := range keys {
			st.ForProxy(k)
			st.NameTableFor(k)
		}
		for _, k := range grpcKeys {
			st.ProxylessFor(k)
		}
	}
	use(publish())
	rng := rand.New(rand.NewPCG(3, 4))
	edits := &ruleEdits{rng: rng, shape: map[string]string{}}
	ruleSteps := 0
	for range 240 {
		key, y := edits.next()
		if rng.IntN(3) == 0 {
			key, y = routeEdit(rng)
		}
		if y == "" {
			delete(w.objs, key)
		} else {
			w.put(key, y)
		}
		if rng.IntN(4) == 0 { // an endpoint moves in the same push
			j := rng.IntN(2)
			w.put(fmt.Sprintf("we-reviews-%d", j), workloadEntry(fmt.Sprintf("reviews-%d", j), "shop", "reviews",
				fmt.Sprintf("10.1.7.%d", 1+rng.IntN(3)), fmt.Sprintf("v%d", j+1), "zone-a", 9080, 1+rng.IntN(3)))
		}
		st := publish()
		if st.State.Diff.Rules != nil || st.State.Diff.Routes != nil {
			ruleSteps++
		}
		use(st)
	}
	for _, mm := range c.Mismatches() {
		t.Error(mm)
	}
	if ruleSteps < 100 {
		t.Fatalf("%d of 240 steps changed DestinationRules or VirtualServices only: the test does not exercise them", ruleSteps)
	}
	if n := generations(t, reg, "rules"); n == 0 {
		t.Errorf("no generation reused earlier output for a rule change (mode rules); %d rule steps", ruleSteps)
	}
}

// TestDestinationRuleEditRegeneratesItsHostOnly checks what a load
// balancer edit of one rule regenerates for a sidecar: its host's
// clusters; every other cluster, assignment, listener and route keeps its
// identity (its prepared bytes).
func TestDestinationRuleEditRegeneratesItsHostOnly(t *testing.T) {
	w := rulesWorld(t)
	rule := func(lb string) string {
		return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: ratings, namespace: shop}
spec:
  host: ratings.shop.svc.cluster.local
  trafficPolicy: {loadBalancer: {simple: %s}}
  subsets: [{name: v1, labels: {version: v1}}, {name: v2, labels: {version: v2}}]
`, lb)
	}
	w.put("dr-ratings", rule("ROUND_ROBIN"))
	reg := prometheus.NewRegistry()
	src := pushctxtest.NewSource()
	m, c := start(t, src, cache.Options{Verify: true, Registerer: reg})
	publish := publisher(t, src, m, c, w)
	k := proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "shop", Labels: "app=client", IPs: "10.9.0.1"}
	r1 := publish().ForProxy(k)

	w.put("dr-ratings", rule("LEAST_REQUEST"))
	st2 := publish()
	if !st2.State.Diff.Rules["ratings.shop.svc.cluster.local"] || len(st2.State.Diff.Rules) != 1 {
		t.Fatalf("diff %+v, want only ratings' rules changed", st2.State.Diff)
	}
	r2 := st2.ForProxy(k)
	changed := map[string]int{}
	for _, typeURL := range []string{typeurl.Cluster, typeurl.Endpoint, typeurl.Listener, typeurl.Route} {
		if len(r1.Resources[typeURL]) != len(r2.Resources[typeURL]) {
			t.Errorf("%s: %d resources, then %d", typeURL, len(r1.Resources[typeURL]), len(r2.Resources[typeURL]))
		}
		for name, p := range r2.Resources[typeURL] {
			if r1.Resources[typeURL][name] != p {
				changed[typeURL]++
			}
		}
	}
	// ratings' two ports, each with its two subsets.
	if changed[typeurl.Cluster] != 6 || len(changed) != 1 {
		t.Errorf("changed per type %v, want the 6 clusters of ratings only", changed)
	}
	if n := generations(t, reg, "rules"); n != 1 {
		t.Errorf("%v generations of mode rules, want 1", n)
	}
	for _, mm := range c.Mismatches() {
		t.Error(mm)
	}
}
