package meshconfig

import (
	"strings"
	"testing"
)

func ef(spec string) string { return object("networking.istio.io/v1alpha3", "EnvoyFilter", spec) }

// efPatch is an EnvoyFilter with one config patch.
func efPatch(patch string) string { return ef("configPatches:\n" + patch) }

// TestValidateEnvoyFilterRejects: whatever nave would not apply of an
// EnvoyFilter refuses the object, naming the field and why.
func TestValidateEnvoyFilterRejects(t *testing.T) {
	tests := []struct{ name, doc, field, reason string }{
		{"no patches", ef("priority: 1"), "spec.configPatches", "at least one config patch"},
		{"targetRefs", ef("targetRefs: [{kind: Gateway, group: gateway.networking.k8s.io, name: gw}]\nconfigPatches: [{applyTo: CLUSTER, patch: {operation: REMOVE}}]"),
			"spec.targetRefs", "not supported"},
		{"applyTo missing", efPatch("- patch: {operation: REMOVE}"), "spec.configPatches[0].applyTo", "required"},
		{"applyTo unsupported", efPatch("- {applyTo: LISTENER_FILTER, patch: {operation: REMOVE}}"), "spec.configPatches[0].applyTo", "LISTENER_FILTER is not supported"},
		{"bootstrap", efPatch("- {applyTo: BOOTSTRAP, patch: {operation: MERGE, value: {}}}"), "spec.configPatches[0].applyTo", "BOOTSTRAP is not supported"},
		{"extension config", efPatch("- {applyTo: EXTENSION_CONFIG, patch: {operation: ADD, value: {}}}"), "spec.configPatches[0].applyTo", "not supported"},
		{"operation unsupported for applyTo", efPatch("- {applyTo: ROUTE_CONFIGURATION, patch: {operation: ADD, value: {name: x}}}"),
			"spec.configPatches[0].patch.operation", "ADD is not supported for applyTo ROUTE_CONFIGURATION (supported: MERGE)"},
		{"replace a listener", efPatch("- {applyTo: LISTENER, patch: {operation: REPLACE, value: {name: x}}}"), "spec.configPatches[0].patch.operation", "REPLACE is not supported"},
		{"merge and replace list", efPatch("- {applyTo: CLUSTER, patch: {operation: MERGE_AND_REPLACE_LIST, value: {}}}"), "spec.configPatches[0].patch.operation", "not supported"},
		{"waypoint", efPatch("- {applyTo: CLUSTER, match: {context: WAYPOINT}, patch: {operation: REMOVE}}"), "spec.configPatches[0].match.context", "WAYPOINT is not supported"},
		{"proxy metadata", efPatch("- {applyTo: CLUSTER, match: {proxy: {metadata: {A: b}}}, patch: {operation: REMOVE}}"), "spec.configPatches[0].match.proxy.metadata", "not supported"},
		{"bad proxyVersion", efPatch("- {applyTo: CLUSTER, match: {proxy: {proxyVersion: '^1\\.('}}, patch: {operation: REMOVE}}"), "spec.configPatches[0].match.proxy.proxyVersion", "regular expression"},
		{"listener filter match", efPatch("- {applyTo: LISTENER, match: {listener: {listenerFilter: envoy.filters.listener.tls_inspector}}, patch: {operation: REMOVE}}"),
			"spec.configPatches[0].match.listener.listenerFilter", "not supported"},
		{"cluster match for a listener", efPatch("- {applyTo: LISTENER, match: {cluster: {name: x}}, patch: {operation: REMOVE}}"), "spec.configPatches[0].match", "takes a listener match"},
		{"subFilter on a network filter", efPatch("- {applyTo: NETWORK_FILTER, match: {listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager, subFilter: {name: r}}}}}, patch: {operation: REMOVE}}"),
			"spec.configPatches[0].match.listener.filterChain.filter.subFilter", "only for applyTo HTTP_FILTER"},
		{"http filter outside hcm", efPatch("- {applyTo: HTTP_FILTER, match: {listener: {filterChain: {filter: {name: envoy.filters.network.tcp_proxy}}}}, patch: {operation: REMOVE}}"),
			"spec.configPatches[0].match.listener.filterChain.filter.name", "never applies"},
		{"remove with a value", efPatch("- {applyTo: CLUSTER, patch: {operation: REMOVE, value: {name: x}}}"), "spec.configPatches[0].patch.value", "takes no value"},
		{"merge without a value", efPatch("- {applyTo: CLUSTER, patch: {operation: MERGE}}"), "spec.configPatches[0].patch.value", "needs a value"},
		{"unknown field in value", efPatch("- {applyTo: CLUSTER, patch: {operation: MERGE, value: {conect_timeout: 1s}}}"), "spec.configPatches[0].patch.value", "envoy.config.cluster.v3.Cluster"},
		{"unknown typed_config type", efPatch("- applyTo: HTTP_FILTER\n  patch:\n    operation: ADD\n    value: {name: x, typed_config: {'@type': type.googleapis.com/example.Unknown}}"),
			"spec.configPatches[0].patch.value", "not among the Envoy extensions nave knows"},
		{"unknown field in typed_config", efPatch("- applyTo: HTTP_FILTER\n  patch:\n    operation: ADD\n    value: {name: x, typed_config: {'@type': type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua, sourceCode: x}}"),
			"spec.configPatches[0].patch.value", "sourceCode"},
		{"invalid whole value", efPatch("- {applyTo: HTTP_FILTER, patch: {operation: ADD, value: {typed_config: {'@type': type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}}}"),
			"spec.configPatches[0].patch.value", "Name"},
		{"filterClass", efPatch("- {applyTo: HTTP_FILTER, patch: {operation: ADD, filterClass: AUTHZ, value: {name: x}}}"), "spec.configPatches[0].patch.filterClass", "not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := decodeErr(t, tt.doc)
			if e.Field != tt.field || !strings.Contains(e.Reason, tt.reason) || e.Kind != "EnvoyFilter" {
				t.Errorf("got %s %s: %q, want field %s and a reason containing %q", e.Kind, e.Field, e.Reason, tt.field, tt.reason)
			}
		})
	}
}

func TestValidateEnvoyFilterAccepts(t *testing.T) {
	for _, doc := range []string{
		efPatch("- {applyTo: CLUSTER, match: {context: SIDECAR_OUTBOUND, cluster: {service: a.b.svc.cluster.local, portNumber: 80, subset: v1}}, patch: {operation: MERGE, value: {connect_timeout: 3s}}}"),
		efPatch("- {applyTo: LISTENER, match: {context: GATEWAY, listener: {portNumber: 8080}}, patch: {operation: MERGE, value: {per_connection_buffer_limit_bytes: 1024}}}"),
		efPatch("- {applyTo: VIRTUAL_HOST, match: {routeConfiguration: {name: '80', vhost: {name: 'a:80'}}}, patch: {operation: REMOVE}}"),
		efPatch("- {applyTo: HTTP_ROUTE, match: {proxy: {proxyVersion: '^1\\.2.*'}, routeConfiguration: {vhost: {route: {action: ROUTE}}}}, patch: {operation: INSERT_FIRST, value: {name: r, match: {prefix: /}, direct_response: {status: 204}}}}"),
		ef("workloadSelector: {labels: {app: a}}\npriority: -5\nconfigPatches: [{applyTo: NETWORK_FILTER, patch: {operation: INSERT_FIRST, value: {name: envoy.filters.network.local_ratelimit, typed_config: {'@type': type.googleapis.com/envoy.extensions.filters.network.local_ratelimit.v3.LocalRateLimit, stat_prefix: l, token_bucket: {max_tokens: 10, fill_interval: 1s}}}}}]"),
	} {
		decodeOne(t, doc, "ok.yaml")
	}
}
