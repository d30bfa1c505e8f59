package patch_test

import (
	"testing"

	"github.com/navemesh/nave/internal/envoysim"
	"github.com/navemesh/nave/xds/gen"
	"github.com/navemesh/nave/xds/gen/gentest"
)

// TestPatchesChangeRequests walks a request with the simulator before
// and after EnvoyFilters that change behaviour: an RBAC filter inserted
// before the router denies /admin on the outbound listener, and a route
// MERGE adds a request header to the split route.
func TestPatchesChangeRequests(t *testing.T) {
	filters := envoyFilter("shop", "deny-admin", `
workloadSelector: {labels: {app: reviews}}
configPatches:
- applyTo: HTTP_FILTER
  match:
    context: SIDECAR_OUTBOUND
    listener: {portNumber: 9080, filterChain: {filter: {name: envoy.filters.network.http_connection_manager, subFilter: {name: envoy.filters.http.router}}}}
  patch:
    operation: INSERT_BEFORE
    value:
      name: envoy.filters.http.rbac
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC
        rules:
          action: DENY
          policies:
            admin: {permissions: [{url_path: {path: {prefix: /admin}}}], principals: [{any: true}]}
- applyTo: HTTP_ROUTE
  match: {context: SIDECAR_OUTBOUND, routeConfiguration: {vhost: {route: {name: split}}}}
  patch: {operation: MERGE, value: {request_headers_to_add: [{header: {key: x-patched, value: "yes"}}]}}`)
	before := gen.Envoy(gentest.Snapshot(t, map[string]string{"c1": gentest.Mesh}), reviews)
	after := gen.Envoy(gentest.Snapshot(t, map[string]string{"c1": gentest.Mesh + filters}), reviews)
	gentest.ValidateDeep(t, after)
	req := func(path string) envoysim.Request {
		return envoysim.Request{IP: "10.96.0.10", Port: 9080, Authority: "reviews:9080", Path: path, Method: "GET"}
	}
	for _, out := range []struct {
		name    string
		sim     *envoysim.Sim
		denied  bool
		patched bool
	}{{"without EnvoyFilters", envoysim.New(before.Resources), false, false}, {"with EnvoyFilters", envoysim.New(after.Resources), true, true}} {
		r := out.sim.Do(req("/admin/x"))
		if r.Err != nil {
			t.Fatalf("%s: %v", out.name, r.Err)
		}
		if (r.Denied != "") != out.denied {
			t.Errorf("%s: GET /admin/x denied %q, want denied %v", out.name, r.Denied, out.denied)
		}
		r = out.sim.Do(req("/api/x"))
		if r.Err != nil || r.Denied != "" || r.Route.GetName() != "split" || len(r.Clusters) != 2 {
			t.Fatalf("%s: GET /api/x: %+v", out.name, r)
		}
		patched := len(r.Route.GetRequestHeadersToAdd()) == 1 && r.Route.GetRequestHeadersToAdd()[0].GetHeader().GetKey() == "x-patched"
		if patched != out.patched {
			t.Errorf("%s: split route adds %v", out.name, r.Route.GetRequestHeadersToAdd())
		}
	}
	// Another workload of the namespace is not selected.
	other := gen.Envoy(gentest.Snapshot(t, map[string]string{"c1": gentest.Mesh + filters}), frontendInShop)
	if r := envoysim.New(other.Resources).Do(req("/admin/x")); r.Denied != "" || r.Err != nil {
		t.Errorf("a workload the filter does not select: %+v", r)
	}
}
