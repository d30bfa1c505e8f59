package files

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestEnvoyFiltersLoadOrAreRefusedWithAReason: a supported EnvoyFilter is
// published; one with what nave does not apply (an operation, a context,
// an unknown Envoy type) and any WasmPlugin are rejected, each naming the
// field and why, and the rest of the file still applies.
func TestEnvoyFiltersLoadOrAreRefusedWithAReason(t *testing.T) {
	const head = "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: %s, namespace: shop}\nspec:\n  configPatches:\n"
	doc := func(name, patch string) string { return strings.Replace(head, "%s", name, 1) + patch }
	dir := t.TempDir()
	write(t, filepath.Join(dir, "filters.yaml"), strings.Join([]string{
		doc("ok", "  - {applyTo: CLUSTER, match: {context: SIDECAR_OUTBOUND}, patch: {operation: MERGE, value: {connect_timeout: 3s}}}\n"),
		doc("replace-listener", "  - {applyTo: LISTENER, patch: {operation: REPLACE, value: {name: x}}}\n"),
		doc("waypoint", "  - {applyTo: CLUSTER, match: {context: WAYPOINT}, patch: {operation: REMOVE}}\n"),
		doc("unknown-type", "  - {applyTo: HTTP_FILTER, patch: {operation: ADD, value: {name: x, typed_config: {'@type': type.googleapis.com/example.Unknown}}}}\n"),
		"apiVersion: extensions.istio.io/v1alpha1\nkind: WasmPlugin\nmetadata: {name: auth, namespace: shop}\nspec: {url: 'oci://example.com/auth:1'}\n",
	}, "---\n"))
	r := start(t, dir, Options{})
	objs, _ := r.last()
	if got := keys(objs); got != "EnvoyFilter shop/ok" {
		t.Errorf("published [%s], want the supported EnvoyFilter only", got)
	}
	want := []struct {
		index                     int
		kind, name, field, reason string
	}{
		{1, "EnvoyFilter", "replace-listener", "spec.configPatches[0].patch.operation", "operation REPLACE is not supported for applyTo LISTENER"},
		{2, "EnvoyFilter", "waypoint", "spec.configPatches[0].match.context", "context WAYPOINT is not supported"},
		{3, "EnvoyFilter", "unknown-type", "spec.configPatches[0].patch.value", "not among the Envoy extensions nave knows"},
		{4, "WasmPlugin", "auth", "", "WasmPlugin is not supported: nave's agent does not fetch Wasm modules"},
	}
	got := r.src.Rejections()
	if len(got) != len(want) {
		t.Fatalf("rejections %+v, want %d", got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.File != "filters.yaml" || g.Index != w.index || g.Kind != w.kind || g.Name != w.name || g.Field != w.field || !strings.Contains(g.Reason, w.reason) {
			t.Errorf("rejection %d = %+v, want #%d %s %s %s ...%q...", i, g, w.index, w.kind, w.name, w.field, w.reason)
		}
	}
}
