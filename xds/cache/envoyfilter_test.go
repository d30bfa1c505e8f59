package cache_test

import (
	"testing"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/cache"
	"github.com/navemesh/nave/xds/proxy"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
)

// TestEnvoyFiltersSplitCacheKeys: proxies that differ only in labels, or
// only in version, share a generation until an EnvoyFilter selects one of
// them (workloadSelector, proxyVersion); then each gets its own config.
func TestEnvoyFiltersSplitCacheKeys(t *testing.T) {
	const filters = `
---
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: by-label, namespace: demo}
spec:
  workloadSelector: {labels: {app: patched}}
  configPatches:
  - {applyTo: CLUSTER, patch: {operation: MERGE, value: {connect_timeout: 9s}}}
---
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: by-version, namespace: demo}
spec:
  configPatches:
  - {applyTo: CLUSTER, match: {proxy: {proxyVersion: '^1\.2[0-9]'}}, patch: {operation: MERGE, value: {per_connection_buffer_limit_bytes: 1}}}
`
	key := func(labels, version string) proxy.Key {
		return proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "demo", IPs: "10.9.0.1", Labels: labels, Version: version}
	}
	for _, tc := range []struct {
		name    string
		yaml    string
		sharing bool
	}{{"without EnvoyFilters", "", true}, {"with EnvoyFilters", filters, false}} {
		t.Run(tc.name, func(t *testing.T) {
			src := pushctxtest.NewSource()
			src.Set("m", pushctxtest.Cluster("c1", true, pushctxtest.Decode(t, pushctxtest.EchoYAML(80, 20, "")+tc.yaml)))
			m, c := start(t, src, cache.Options{Verify: true})
			_, ready := m.Current("m")
			m.Notify("m")
			pushctxtest.Await(t, ready, "the mesh is published")
			st := current(c, m, "m")
			plain := st.ForProxy(key("app=plain", "1.19.0"))
			for _, other := range []proxy.Key{key("app=patched", "1.19.0"), key("app=plain", "1.24.1")} {
				got := st.ForProxy(other)
				if (got == plain) != tc.sharing {
					t.Errorf("%v shares the generation of app=plain 1.19.0: %v, want %v", other, got == plain, tc.sharing)
				}
				if !tc.sharing && got.Resources[typeurl.Cluster]["BlackHoleCluster"].Hash == plain.Resources[typeurl.Cluster]["BlackHoleCluster"].Hash {
					t.Errorf("%v: BlackHoleCluster not patched", other)
				}
			}
			if mm := c.Mismatches(); len(mm) > 0 {
				t.Errorf("mismatches %v", mm)
			}
		})
	}
}
