package pushctx_test

import (
	"sync"
	"testing"
	"time"

	"github.com/navemesh/nave/hub/pushctx"
	"github.com/navemesh/nave/shared/gen"
	"github.com/navemesh/nave/shared/proxy"
)

// TestForProxyGeneratesOncePerKeyAndSharesBytes checks the per-proxy
// memo: equal keys share one result (also when asked concurrently), and a
// resource with the same content for two keys is marshalled once.
func TestForProxyGeneratesOncePerKeyAndSharesBytes(t *testing.T) {
	src := newSource()
	src.set("m", cluster("c1", true, echoConfig(t, 80, 20)))
	m := start(t, src, time.Millisecond, 10*time.Millisecond)
	_, ready := m.Current("m")
	m.Notify("m")
	await(t, ready, "the mesh is published")
	st, _ := m.Current("m")

	a := proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "demo", IPs: "10.9.0.1"}
	b := proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "demo", IPs: "10.9.0.2"}
	var wg sync.WaitGroup
	results := make([]*pushctx.ProxyResources, 8)
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
	clusters := ra.Resources[gen.ClusterType]
	if len(clusters) == 0 {
		t.Fatal("no clusters generated")
	}
	for name, p := range clusters {
		if q := rb.Resources[gen.ClusterType][name]; q != p {
			t.Fatalf("cluster %s: same content for two keys was not shared (%p vs %p)", name, p, q)
		}
	}
}
