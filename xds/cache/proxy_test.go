package cache_test

import (
	"sync"
	"testing"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/cache"
	"github.com/navemesh/nave/xds/gen/proxyless"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
	"github.com/navemesh/nave/xds/resource"
)

// TestForProxyGeneratesOncePerKeyAndSharesBytes checks the per-proxy
// memo: equal keys share one result (also when asked concurrently), and a
// resource with the same content for two keys is marshalled once.
func TestForProxyGeneratesOncePerKeyAndSharesBytes(t *testing.T) {
	src := pushctxtest.NewSource()
	src.Set("m", pushctxtest.Cluster("c1", true, pushctxtest.EchoConfig(t, 80, 20)))
	m, c := start(t, src, cache.Options{})
	_, ready := m.Current("m")
	m.Notify("m")
	pushctxtest.Await(t, ready, "the mesh is published")
	st := current(c, m, "m")

	a := proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "demo", IPs: "10.9.0.1"}
	b := proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "other", IPs: "10.9.0.2"}
	var wg sync.WaitGroup
	results := make([]*resource.ProxyResources, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = st.ForProxy(a)
		}()
	}
	wg.Wait()
	for _, r := range results[1:] {
		if r != results[0] {
			t.Fatal("equal keys got different results")
		}
	}
	ra, rb := st.ForProxy(a), st.ForProxy(b)
	if ra == rb {
		t.Fatal("different keys got the same result")
	}
	clusters := ra.Resources[typeurl.Cluster]
	if len(clusters) == 0 {
		t.Fatal("no clusters generated")
	}
	for name, p := range clusters {
		if q := rb.Resources[typeurl.Cluster][name]; q != p {
			t.Fatalf("cluster %s: same content for two keys was not shared (%p vs %p)", name, p, q)
		}
	}
}

// TestKeysDifferingOnlyInIPsShareGeneration: IPs matter only through the
// ports their workloads serve, so proxies whose IPs serve nothing (or the
// same ports) share one generation, and one that serves differs.
func TestKeysDifferingOnlyInIPsShareGeneration(t *testing.T) {
	src := pushctxtest.NewSource()
	src.Set("m", pushctxtest.Cluster("c1", true, pushctxtest.EchoConfig(t, 80, 20)))
	m, c := start(t, src, cache.Options{Verify: true})
	_, ready := m.Current("m")
	m.Notify("m")
	pushctxtest.Await(t, ready, "the mesh is published")
	st := current(c, m, "m")

	key := func(ips string) proxy.Key {
		return proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "demo", IPs: ips}
	}
	a, b := st.ForProxy(key("10.9.0.1")), st.ForProxy(key("10.9.0.2"))
	if a != b {
		t.Error("two proxies whose IPs serve nothing did not share a generation")
	}
	labelled := key("10.9.0.3")
	labelled.Labels = "app=client-7" // no selector in the config reads it
	if st.ForProxy(labelled) != a {
		t.Error("a proxy whose labels select nothing did not share the generation")
	}
	// 127.0.0.1 is echo's workload address: it has inbound ports.
	own := st.ForProxy(key("127.0.0.1"))
	if own == a {
		t.Error("a proxy serving echo shares the config of one serving nothing")
	}
	if len(own.Resources[typeurl.Cluster]) <= len(a.Resources[typeurl.Cluster]) {
		t.Errorf("the serving proxy has %d clusters, the other %d: want its inbound clusters too",
			len(own.Resources[typeurl.Cluster]), len(a.Resources[typeurl.Cluster]))
	}
	if mm := c.Mismatches(); len(mm) > 0 {
		t.Errorf("shared results differ from generation from scratch: %v", mm)
	}
}

// TestProxylessServersGetTheirServerListeners: a proxyless client whose
// IPs serve ports receives, besides the mesh-wide resources, the server
// listeners of those ports (shared by keys of equal signatures); one that
// serves nothing receives the mesh-wide resources alone.
func TestProxylessServersGetTheirServerListeners(t *testing.T) {
	src := pushctxtest.NewSource()
	src.Set("m", pushctxtest.Cluster("c1", true, pushctxtest.EchoConfig(t, 80, 20)))
	m, c := start(t, src, cache.Options{Verify: true})
	_, ready := m.Current("m")
	m.Notify("m")
	pushctxtest.Await(t, ready, "the mesh is published")
	st := current(c, m, "m")

	key := func(ips string) proxy.Key {
		return proxy.Key{Type: proxy.GRPC, Mesh: "m", Namespace: "demo", Labels: "app=echo", IPs: ips}
	}
	base := st.Proxyless()
	if st.ProxylessFor(key("10.9.0.1")) != base || st.ProxylessFor(key("")) != base {
		t.Error("a client that serves nothing does not get the mesh-wide resources as they are")
	}
	// 127.0.0.1 serves echo on 17071 and 17072.
	own := st.ProxylessFor(key("127.0.0.1"))
	for _, port := range []string{"17071", "17072"} {
		for _, host := range []string{"0.0.0.0:", "[::]:"} {
			if own.Resources[typeurl.Listener][proxyless.ServerListenerName(host+port)] == nil {
				t.Errorf("no server listener for %s%s", host, port)
			}
		}
	}
	if got, want := len(own.Resources[typeurl.Listener]), len(base.Resources[typeurl.Listener])+4; got != want {
		t.Errorf("%d listeners, want the %d mesh-wide ones and 4 server listeners", got, want-4)
	}
	for name, p := range base.Resources[typeurl.Listener] {
		if own.Resources[typeurl.Listener][name] != p {
			t.Errorf("mesh-wide listener %s is not shared", name)
		}
	}
	if own.Resources[typeurl.Cluster] == nil || len(own.Resources[typeurl.Cluster]) != len(base.Resources[typeurl.Cluster]) {
		t.Error("the other types are not the mesh-wide ones")
	}
	if st.ProxylessFor(key("127.0.0.1")) != own {
		t.Error("a second call generates again")
	}
	if mm := c.Mismatches(); len(mm) > 0 {
		t.Errorf("shared results differ from generation from scratch: %v", mm)
	}
}

// TestEnvoyKeysShareGenerationAcrossLocalitiesUnlessARuleReadsIt: with no
// rule reading a proxy's locality, sidecars in two zones share one
// generation; once a DestinationRule balances by locality (outlierDetection:
// failover by proximity), they do not, and each gets its own zone first.
// A sidecar whose bootstrap says nothing balances from its workload's
// locality in the registry.
func TestEnvoyKeysShareGenerationAcrossLocalitiesUnlessARuleReadsIt(t *testing.T) {
	const endpoints = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: zoned, namespace: demo}
spec:
  hosts: [zoned.demo.svc.cluster.local]
  location: MESH_INTERNAL
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.1.0.1, locality: r/z1}, {address: 10.1.0.2, locality: r/z2}]
`
	const dr = `---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: zoned, namespace: demo}
spec:
  host: zoned.demo.svc.cluster.local
  trafficPolicy: {outlierDetection: {consecutive5xxErrors: 5}}
`
	key := func(zone, ips string) proxy.Key {
		k := proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "demo", IPs: ips}
		if zone != "" {
			k.Locality = mesh.Locality{Region: "r", Zone: zone}
		}
		return k
	}
	for _, c := range []struct {
		name   string
		config string
		shared bool
	}{{"no rule reads the locality", endpoints, true}, {"failover by proximity", endpoints + dr, false}} {
		t.Run(c.name, func(t *testing.T) {
			src := pushctxtest.NewSource()
			src.Set("m", pushctxtest.Cluster("c1", true, pushctxtest.Decode(t, c.config)))
			m, ca := start(t, src, cache.Options{Verify: true})
			_, ready := m.Current("m")
			m.Notify("m")
			pushctxtest.Await(t, ready, "the mesh is published")
			st := current(ca, m, "m")
			z1, z2 := st.ForProxy(key("z1", "10.9.0.1")), st.ForProxy(key("z2", "10.9.0.2"))
			if (z1 == z2) != c.shared {
				t.Fatalf("sidecars in z1 and z2 share a generation: %v, want %v", z1 == z2, c.shared)
			}
			// 10.1.0.2 is a workload in z2: its sidecar, whose bootstrap
			// names no locality, is served as one in z2.
			if fromRegistry := st.ForProxy(key("", "10.1.0.2")); !c.shared && !sameEndpoints(fromRegistry, z2) {
				t.Error("a sidecar of a z2 workload without a bootstrap locality is not served as z2's")
			}
			if mm := ca.Mismatches(); len(mm) > 0 {
				t.Errorf("shared results differ from generation from scratch: %v", mm)
			}
		})
	}
}

// sameEndpoints reports whether a and b hold the same assignments.
func sameEndpoints(a, b *resource.ProxyResources) bool {
	ea, eb := a.Resources[typeurl.Endpoint], b.Resources[typeurl.Endpoint]
	if len(ea) != len(eb) || len(ea) == 0 {
		return false
	}
	for name, p := range ea {
		if q := eb[name]; q != p {
			return false
		}
	}
	return true
}
