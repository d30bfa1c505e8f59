package kube

import (
	"slices"
	"strings"
	"testing"

	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/navemesh/nave/internal/kubetest"
	"github.com/navemesh/nave/shared/meshconfig"
)

const (
	luaFilter = `
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: lua, namespace: shop}
spec:
  workloadSelector: {labels: {app: web}}
  configPatches:
  - applyTo: HTTP_FILTER
    match:
      context: SIDECAR_INBOUND
      listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager, subFilter: {name: envoy.filters.http.router}}}}
    patch:
      operation: INSERT_BEFORE
      value:
        name: envoy.filters.http.lua
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua
          default_source_code: {inline_string: "function envoy_on_request(h) end"}
`
	// replaceListener passes the CRD's schema but is an operation nave
	// refuses (Istio ignores it).
	replaceListener = `
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: replace-listener, namespace: shop}
spec:
  configPatches:
  - applyTo: LISTENER
    patch: {operation: REPLACE, value: {name: x}}
`
	wasmPlugin = `
apiVersion: extensions.istio.io/v1alpha1
kind: WasmPlugin
metadata: {name: auth, namespace: shop}
spec:
  url: oci://example.com/auth:1
`
)

// TestKubeSourceEnvoyFilterAndWasmPlugin: against a real API server,
// EnvoyFilters (v1alpha3) are watched and published; one nave would not
// apply is rejected with its reason in the kind's status; every
// WasmPlugin is reported as refused, with why.
func TestKubeSourceEnvoyFilterAndWasmPlugin(t *testing.T) {
	c := kubetest.Start(t, kubetest.Options{})
	c.Apply(t, repoFile(t, "deploy/spoke/istio-crds.yaml"))
	k := newClient(t, c)
	k.namespace("shop", nil)
	c.Apply(t, []byte(luaFilter), []byte(replaceListener), []byte(wasmPlugin))

	src := runSource(t, c.Admin, Options{})
	objs := src.waitPublished(t, "the EnvoyFilter", has("EnvoyFilter", "shop/lua"))
	ef, _ := find(objs, "EnvoyFilter", "shop/lua").Spec.(*networkingv1alpha3.EnvoyFilter)
	if p := ef.GetConfigPatches(); len(p) != 1 || p[0].GetPatch().GetOperation() != networkingv1alpha3.EnvoyFilter_Patch_INSERT_BEFORE ||
		p[0].GetPatch().GetValue().GetFields()["name"].GetStringValue() != "envoy.filters.http.lua" {
		t.Errorf("published spec %v", ef)
	}
	if find(objs, "EnvoyFilter", "shop/replace-listener") != nil {
		t.Error("the EnvoyFilter nave refuses was published")
	}
	waitFor(t, "both rejections in the status", func() bool {
		return len(src.kindStatus(t, "EnvoyFilter").Invalid) == 1 && len(src.kindStatus(t, "WasmPlugin").Invalid) == 1
	})
	if st := src.kindStatus(t, "EnvoyFilter"); st.Resource != "envoyfilters.networking.istio.io" || st.Objects != 2 ||
		st.Invalid[0].Name != "replace-listener" || st.Invalid[0].Field != "spec.configPatches[0].patch.operation" ||
		!strings.Contains(st.Invalid[0].Reason, "REPLACE is not supported for applyTo LISTENER") {
		t.Errorf("EnvoyFilter status %+v", st)
	}
	if st := src.kindStatus(t, "WasmPlugin"); st.Objects != 1 || st.Invalid[0].Name != "auth" ||
		st.Invalid[0].Reason != meshconfig.RefusedKindReasons["WasmPlugin"] {
		t.Errorf("WasmPlugin status %+v", st)
	}

	// A change is followed: the refused filter fixed, the Lua one deleted.
	c.Apply(t, []byte(strings.Replace(replaceListener, "operation: REPLACE, value: {name: x}", "operation: REMOVE", 1)))
	if err := k.istio.NetworkingV1alpha3().EnvoyFilters("shop").Delete(t.Context(), "lua", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	objs = src.waitPublished(t, "the fixed EnvoyFilter, without the deleted one",
		all(has("EnvoyFilter", "shop/replace-listener"), hasNot("EnvoyFilter", "shop/lua")))
	if n := slices.IndexFunc(objs, func(o *meshconfig.Object) bool { return o.Kind.Kind == "WasmPlugin" }); n >= 0 {
		t.Error("a WasmPlugin was published")
	}
}
