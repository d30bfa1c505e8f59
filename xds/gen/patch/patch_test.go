package patch_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// update rewrites the golden files instead of comparing with them:
//
//	go test ./xds/gen/patch/ -run TestPatches -update
var update = flag.Bool("update", false, "rewrite testdata/golden/ from the patcher's current output")

var (
	reviews = proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "shop", Labels: "app=reviews\nversion=v1", IPs: "10.1.0.1",
		Locality: mesh.ParseLocality("us-east/a")}
	frontend = proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "web", Labels: "app=frontend", IPs: "10.2.0.1",
		Locality: mesh.ParseLocality("us-east/a")}
	ingress = proxy.Key{Type: proxy.Router, Mesh: "m", Namespace: "istio-system", Labels: "istio=ingressgateway", IPs: "10.3.0.1", SDSCluster: "sds-grpc",
		Locality: mesh.ParseLocality("us-east/a")}
)

// envoyFilter renders an EnvoyFilter in namespace ns with the given spec.
func envoyFilter(ns, name, spec string) string {
	var b strings.Builder
	b.WriteString("---\napiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: " + name + ", namespace: " + ns + "}\nspec:\n")
	for line := range strings.Lines(strings.TrimLeft(spec, "\n")) {
		b.WriteString("  " + line)
	}
	return strings.TrimSuffix(b.String(), "\n") + "\n"
}

const lua = `name: envoy.filters.http.lua
typed_config:
  "@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua
  default_source_code: {inline_string: "function envoy_on_request(h) end"}`

// indent indents a YAML block by n spaces.
func indent(s string, n int) string {
	pad := strings.Repeat(" ", n)
	return pad + strings.ReplaceAll(s, "\n", "\n"+pad)
}

// patchCases: each applyTo with each operation it supports, in each
// context (SIDECAR_INBOUND, SIDECAR_OUTBOUND, GATEWAY, ANY), plus
// selection and ordering. check asserts what the patch did; the golden
// file records every resource it changed.
var patchCases = []struct {
	name  string
	key   proxy.Key
	yaml  string
	check func(t *testing.T, got *build.Output)
}{
	{"listener-merge-outbound", reviews, envoyFilter("shop", "f", `
configPatches:
- applyTo: LISTENER
  match: {context: SIDECAR_OUTBOUND, listener: {portNumber: 9080}}
  patch: {operation: MERGE, value: {per_connection_buffer_limit_bytes: 65536}}`), func(t *testing.T, got *build.Output) {
		if l := listener(t, got, "0.0.0.0_9080"); l.GetPerConnectionBufferLimitBytes().GetValue() != 65536 {
			t.Errorf("buffer limit %v", l.GetPerConnectionBufferLimitBytes())
		}
		if l := listener(t, got, "0.0.0.0_8080"); l.GetPerConnectionBufferLimitBytes() != nil {
			t.Error("another port's listener was merged")
		}
	}},
	{"listener-add-gateway", ingress, envoyFilter("istio-system", "f", `
configPatches:
- applyTo: LISTENER
  match: {context: GATEWAY}
  patch:
    operation: ADD
    value:
      name: extra_9999
      address: {socket_address: {address: 0.0.0.0, port_value: 9999}}
      filter_chains:
      - filters:
        - name: envoy.filters.network.tcp_proxy
          typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: extra, cluster: BlackHoleCluster}`), func(t *testing.T, got *build.Output) {
		listener(t, got, "extra_9999")
	}},
	{"listener-add-any-skips-inbound", reviews, envoyFilter("shop", "f", `
configPatches:
- applyTo: LISTENER
  patch:
    operation: ADD
    value: {name: extra_9999, address: {socket_address: {address: 0.0.0.0, port_value: 9999}}, filter_chains: [{filters: [{name: envoy.filters.network.tcp_proxy, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: x, cluster: BlackHoleCluster}}]}]}`), func(t *testing.T, got *build.Output) {
		if n := count(got, typeurl.Listener, "extra_9999"); n != 1 {
			t.Errorf("added %d times, want once (outbound only)", n)
		}
	}},
	{"listener-remove-gateway", ingress, envoyFilter("istio-system", "f", `
configPatches:
- {applyTo: LISTENER, match: {context: GATEWAY, listener: {portNumber: 80}}, patch: {operation: REMOVE}}`), func(t *testing.T, got *build.Output) {
		if gentest.ByName(got, typeurl.Listener, "0.0.0.0_80").Message != nil {
			t.Error("listener 0.0.0.0_80 still there")
		}
	}},
	{"filter-chain-merge-inbound", reviews, envoyFilter("shop", "f", `
configPatches:
- applyTo: FILTER_CHAIN
  match: {context: SIDECAR_INBOUND, listener: {portNumber: 9080}}
  patch: {operation: MERGE, value: {transport_socket_connect_timeout: 3s}}`), func(t *testing.T, got *build.Output) {
		fc := chain(t, listener(t, got, "virtualInbound"), "inbound|9080||")
		if fc.GetTransportSocketConnectTimeout().AsDuration().Seconds() != 3 {
			t.Errorf("timeout %v", fc.GetTransportSocketConnectTimeout())
		}
		if chain(t, listener(t, got, "virtualInbound"), "InboundPassthroughFilterChain").GetTransportSocketConnectTimeout() != nil {
			t.Error("the passthrough chain (another port) was merged")
		}
	}},
	{"filter-chain-remove-and-add-inbound", reviews, envoyFilter("shop", "f", `
configPatches:
- {applyTo: FILTER_CHAIN, match: {context: SIDECAR_INBOUND, listener: {name: virtualInbound, filterChain: {name: InboundPassthroughFilterChain}}}, patch: {operation: REMOVE}}
- applyTo: FILTER_CHAIN
  match: {context: SIDECAR_INBOUND, listener: {name: virtualInbound}}
  patch:
    operation: ADD
    value: {name: extra, filter_chain_match: {destination_port: 7777}, filters: [{name: envoy.filters.network.tcp_proxy, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: x, cluster: InboundPassthroughCluster}}]}`), func(t *testing.T, got *build.Output) {
		l := listener(t, got, "virtualInbound")
		if l.GetDefaultFilterChain() != nil {
			t.Error("passthrough (default) chain not removed")
		}
		chain(t, l, "extra")
	}},
	{"network-filter-insert-first-inbound", reviews, envoyFilter("shop", "f", `
configPatches:
- applyTo: NETWORK_FILTER
  match: {context: SIDECAR_INBOUND, listener: {filterChain: {name: InboundPassthroughFilterChain}}}
  patch:
    operation: INSERT_FIRST
    value: {name: envoy.filters.network.local_ratelimit, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.local_ratelimit.v3.LocalRateLimit, stat_prefix: rl, token_bucket: {max_tokens: 10, fill_interval: 1s}}}`), func(t *testing.T, got *build.Output) {
		fc := chain(t, listener(t, got, "virtualInbound"), "InboundPassthroughFilterChain")
		if fc.GetFilters()[0].GetName() != "envoy.filters.network.local_ratelimit" {
			t.Errorf("filters %v", filterNames(fc))
		}
	}},
	{"network-filter-insert-before-after-replace-remove-outbound", reviews, envoyFilter("shop", "f", `
configPatches:
- applyTo: NETWORK_FILTER
  match: {context: SIDECAR_OUTBOUND, listener: {name: 10.96.0.11_5432, filterChain: {filter: {name: envoy.filters.network.tcp_proxy}}}}
  patch: {operation: INSERT_BEFORE, value: {name: before, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit, stat_prefix: b, max_connections: 5}}}
- applyTo: NETWORK_FILTER
  match: {context: SIDECAR_OUTBOUND, listener: {name: 10.96.0.11_5432, filterChain: {filter: {name: before}}}}
  patch: {operation: INSERT_AFTER, value: {name: after, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit, stat_prefix: a, max_connections: 6}}}
- applyTo: NETWORK_FILTER
  match: {context: SIDECAR_OUTBOUND, listener: {name: 10.96.0.11_5432, filterChain: {filter: {name: after}}}}
  patch: {operation: REPLACE, value: {name: replaced, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit, stat_prefix: r, max_connections: 7}}}
- applyTo: NETWORK_FILTER
  match: {context: SIDECAR_OUTBOUND, listener: {name: 10.96.0.11_5432, filterChain: {filter: {name: before}}}}
  patch: {operation: REMOVE}`), func(t *testing.T, got *build.Output) {
		fc := listener(t, got, "10.96.0.11_5432").GetFilterChains()[0]
		if got := filterNames(fc); !slices.Equal(got, []string{"replaced", "envoy.filters.network.tcp_proxy"}) {
			t.Errorf("filters %v", got)
		}
	}},
	{"network-filter-merge-hcm-any", frontend, envoyFilter("web", "f", `
configPatches:
- applyTo: NETWORK_FILTER
  match: {listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager}}}}
  patch:
    operation: MERGE
    value: {typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager, server_name: nave-test}}`), func(t *testing.T, got *build.Output) {
		for _, name := range []string{"0.0.0.0_8080", "virtualInbound"} {
			for _, fc := range listener(t, got, name).GetFilterChains() {
				if h := hcm(t, fc); h != nil && h.GetServerName() != "nave-test" {
					t.Errorf("%s %s: server name %q", name, fc.GetName(), h.GetServerName())
				}
			}
		}
	}},
	{"http-filter-insert-before-router-inbound", reviews, envoyFilter("shop", "f", `
configPatches:
- applyTo: HTTP_FILTER
  match:
    context: SIDECAR_INBOUND
    listener: {portNumber: 9080, filterChain: {filter: {name: envoy.filters.network.http_connection_manager, subFilter: {name: envoy.filters.http.router}}}}
  patch:
    operation: INSERT_BEFORE
    value:
`+indent(lua, 6)), func(t *testing.T, got *build.Output) {
		h := hcm(t, chain(t, listener(t, got, "virtualInbound"), "inbound|9080||"))
		names := httpFilterNames(h)
		if len(names) < 2 || names[len(names)-2] != "envoy.filters.http.lua" {
			t.Errorf("http filters %v", names)
		}
		if h := hcm(t, listener(t, got, "0.0.0.0_9080").GetFilterChains()[0]); slices.Contains(httpFilterNames(h), "envoy.filters.http.lua") {
			t.Error("the outbound listener got the inbound patch")
		}
	}},
	{"http-filter-add-insert-first-gateway", ingress, envoyFilter("istio-system", "f", `
configPatches:
- applyTo: HTTP_FILTER
  match: {context: GATEWAY, listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager}}}}
  patch:
    operation: INSERT_FIRST
    value:
`+indent(lua, 6)+`
- applyTo: HTTP_FILTER
  match: {context: GATEWAY, listener: {portNumber: 443, filterChain: {filter: {name: envoy.filters.network.http_connection_manager, subFilter: {name: envoy.filters.http.cors}}}}}
  patch: {operation: INSERT_AFTER, value: {name: envoy.filters.http.buffer, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.buffer.v3.Buffer, max_request_bytes: 1024}}}`), func(t *testing.T, got *build.Output) {
		if names := httpFilterNames(hcm(t, listener(t, got, "0.0.0.0_80").GetFilterChains()[0])); names[0] != "envoy.filters.http.lua" || slices.Contains(names, "envoy.filters.http.buffer") {
			t.Errorf("port 80: %v", names)
		}
		names := httpFilterNames(hcm(t, listener(t, got, "0.0.0.0_443").GetFilterChains()[0]))
		if i := slices.Index(names, "envoy.filters.http.cors"); names[0] != "envoy.filters.http.lua" || i < 0 || names[i+1] != "envoy.filters.http.buffer" {
			t.Errorf("port 443: %v", names)
		}
	}},
	{"http-filter-replace-remove-merge-outbound", frontend, envoyFilter("web", "f", `
configPatches:
- applyTo: HTTP_FILTER
  match: {context: SIDECAR_OUTBOUND, listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager, subFilter: {name: envoy.filters.http.fault}}}}}
  patch: {operation: REMOVE}
- applyTo: HTTP_FILTER
  match: {context: SIDECAR_OUTBOUND, listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager, subFilter: {name: envoy.filters.http.cors}}}}}
  patch:
    operation: REPLACE
    value:
`+indent(lua, 6)+`
- applyTo: HTTP_FILTER
  match: {context: SIDECAR_OUTBOUND, listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager, subFilter: {name: envoy.filters.http.router}}}}}
  patch: {operation: MERGE, value: {typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router, suppress_envoy_headers: true}}}
- applyTo: HTTP_FILTER
  match: {context: SIDECAR_OUTBOUND, listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager}}}}
  patch: {operation: ADD, value: {name: last, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.buffer.v3.Buffer, max_request_bytes: 1}}}`), func(t *testing.T, got *build.Output) {
		h := hcm(t, listener(t, got, "0.0.0.0_9080").GetFilterChains()[0])
		if names := httpFilterNames(h); !slices.Equal(names, []string{"envoy.filters.http.lua", "envoy.filters.http.router", "last"}) {
			t.Errorf("http filters %v", names)
		}
		router := &routerv3.Router{}
		if err := h.GetHttpFilters()[1].GetTypedConfig().UnmarshalTo(router); err != nil || !router.GetSuppressEnvoyHeaders() {
			t.Errorf("router not merged: %v %v", router, err)
		}
	}},
	{"route-configuration-merge-outbound-and-inbound", reviews, envoyFilter("shop", "f", `
configPatches:
- applyTo: ROUTE_CONFIGURATION
  match: {context: SIDECAR_OUTBOUND, routeConfiguration: {portNumber: 9080}}
  patch: {operation: MERGE, value: {request_headers_to_add: [{header: {key: x-out, value: "1"}}]}}
- applyTo: ROUTE_CONFIGURATION
  match: {context: SIDECAR_INBOUND, routeConfiguration: {portNumber: 9080}}
  patch: {operation: MERGE, value: {response_headers_to_add: [{header: {key: x-in, value: "1"}}]}}`), func(t *testing.T, got *build.Output) {
		if rc := routeConfig(t, got, "9080"); len(rc.GetRequestHeadersToAdd()) != 1 || len(rc.GetResponseHeadersToAdd()) != 0 {
			t.Errorf("outbound 9080: %v", rc)
		}
		if rc := routeConfig(t, got, "8080"); len(rc.GetRequestHeadersToAdd()) != 0 {
			t.Error("port 8080 merged")
		}
		if rc := hcm(t, chain(t, listener(t, got, "virtualInbound"), "inbound|9080||")).GetRouteConfig(); len(rc.GetResponseHeadersToAdd()) != 1 {
			t.Errorf("inbound inline route config: %v", rc)
		}
	}},
	{"route-configuration-merge-gateway", ingress, envoyFilter("istio-system", "f", `
configPatches:
- applyTo: ROUTE_CONFIGURATION
  match: {context: GATEWAY, routeConfiguration: {portNumber: 443, portName: "1", gateway: web/public}}
  patch: {operation: MERGE, value: {max_direct_response_body_size_bytes: 2048}}`), func(t *testing.T, got *build.Output) {
		if rc := routeConfig(t, got, "https.443.1.public.web"); rc.GetMaxDirectResponseBodySizeBytes().GetValue() != 2048 {
			t.Errorf("https route config %v", rc.GetMaxDirectResponseBodySizeBytes())
		}
		if rc := routeConfig(t, got, "http.80"); rc.GetMaxDirectResponseBodySizeBytes() != nil {
			t.Error("http.80 merged")
		}
	}},
	{"virtual-host-add-merge-remove-replace", frontend, envoyFilter("web", "f", `
configPatches:
- applyTo: VIRTUAL_HOST
  match: {context: SIDECAR_OUTBOUND, routeConfiguration: {name: "8080"}}
  patch: {operation: ADD, value: {name: extra, domains: [extra.example], routes: [{match: {prefix: /}, direct_response: {status: 204}}]}}
- applyTo: VIRTUAL_HOST
  match: {context: SIDECAR_OUTBOUND, routeConfiguration: {name: "8080", vhost: {name: "frontend.web.svc.cluster.local:8080"}}}
  patch: {operation: MERGE, value: {include_request_attempt_count: true}}
- applyTo: VIRTUAL_HOST
  match: {context: SIDECAR_OUTBOUND, routeConfiguration: {name: "9080", vhost: {name: block_all}}}
  patch: {operation: REMOVE}
- applyTo: VIRTUAL_HOST
  match: {context: SIDECAR_OUTBOUND, routeConfiguration: {name: "8080", vhost: {name: block_all}}}
  patch: {operation: REPLACE, value: {name: replaced, domains: ["*"], routes: [{match: {prefix: /}, direct_response: {status: 418}}]}}`), func(t *testing.T, got *build.Output) {
		rc := routeConfig(t, got, "8080")
		if got := vhostNames(rc); !slices.Equal(got, []string{"frontend.web.svc.cluster.local:8080", "replaced", "extra"}) {
			t.Errorf("8080 virtual hosts %v", got)
		}
		if !rc.GetVirtualHosts()[0].GetIncludeRequestAttemptCount() {
			t.Error("not merged")
		}
		if got := vhostNames(routeConfig(t, got, "9080")); slices.Contains(got, "block_all") {
			t.Errorf("9080 virtual hosts %v", got)
		}
	}},
	{"http-route-insert-merge-remove", reviews, envoyFilter("shop", "f", `
configPatches:
- applyTo: HTTP_ROUTE
  match: {context: SIDECAR_OUTBOUND, routeConfiguration: {name: "9080", vhost: {name: "reviews.shop.svc.cluster.local:9080", route: {name: split}}}}
  patch: {operation: INSERT_BEFORE, value: {name: health, match: {path: /healthz}, direct_response: {status: 200}}}
- applyTo: HTTP_ROUTE
  match: {context: SIDECAR_OUTBOUND, routeConfiguration: {name: "9080", vhost: {name: "reviews.shop.svc.cluster.local:9080", route: {name: split}}}}
  patch: {operation: INSERT_AFTER, value: {name: tail, match: {prefix: /}, direct_response: {status: 404}}}
- applyTo: HTTP_ROUTE
  match: {context: SIDECAR_OUTBOUND, routeConfiguration: {name: "9080", vhost: {name: "reviews.shop.svc.cluster.local:9080"}}}
  patch: {operation: INSERT_FIRST, value: {name: first, match: {path: /first}, direct_response: {status: 200}}}
- applyTo: HTTP_ROUTE
  match: {context: SIDECAR_OUTBOUND, routeConfiguration: {name: "9080", vhost: {name: "reviews.shop.svc.cluster.local:9080", route: {name: split}}}}
  patch: {operation: MERGE, value: {request_headers_to_add: [{header: {key: x-merged, value: "1"}}]}}
- applyTo: HTTP_ROUTE
  match: {context: SIDECAR_OUTBOUND, routeConfiguration: {name: "9080", vhost: {name: "reviews.shop.svc.cluster.local:9080", route: {name: beta}}}}
  patch: {operation: REMOVE}
- applyTo: HTTP_ROUTE
  match: {context: SIDECAR_OUTBOUND, routeConfiguration: {name: "9080", vhost: {name: "ratings.shop.svc.cluster.local:9080"}}}
  patch: {operation: ADD, value: {name: added, match: {prefix: /added}, direct_response: {status: 201}}}`), func(t *testing.T, got *build.Output) {
		rc := routeConfig(t, got, "9080")
		var r9 *routev3.VirtualHost
		for _, vh := range rc.GetVirtualHosts() {
			if vh.GetName() == "reviews.shop.svc.cluster.local:9080" {
				r9 = vh
			}
		}
		var names []string
		for _, r := range r9.GetRoutes() {
			names = append(names, r.GetName())
		}
		if !slices.Equal(names, []string{"first", "health", "split", "tail"}) {
			t.Errorf("routes %v", names)
		}
		if len(r9.GetRoutes()[2].GetRequestHeadersToAdd()) == 0 {
			t.Error("split not merged")
		}
	}},
	{"cluster-merge-add-remove-outbound-inbound", reviews, envoyFilter("shop", "f", `
configPatches:
- applyTo: CLUSTER
  match: {context: SIDECAR_OUTBOUND, cluster: {service: reviews.shop.svc.cluster.local, portNumber: 9080, subset: v2}}
  patch: {operation: MERGE, value: {connect_timeout: 7s, per_connection_buffer_limit_bytes: 1024}}
- applyTo: CLUSTER
  match: {context: SIDECAR_INBOUND, cluster: {portNumber: 9080}}
  patch: {operation: MERGE, value: {connect_timeout: 2s}}
- {applyTo: CLUSTER, match: {context: SIDECAR_OUTBOUND, cluster: {name: "outbound|443||api.payments.example"}}, patch: {operation: REMOVE}}
- applyTo: CLUSTER
  match: {context: SIDECAR_OUTBOUND}
  patch:
    operation: ADD
    value: {name: ratelimit, type: STRICT_DNS, connect_timeout: 1s, load_assignment: {cluster_name: ratelimit, endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: ratelimit.example, port_value: 8081}}}}]}]}}`), func(t *testing.T, got *build.Output) {
		if c := cluster(t, got, "outbound|9080|v2|reviews.shop.svc.cluster.local"); c.GetConnectTimeout().AsDuration().Seconds() != 7 {
			t.Errorf("v2 connect timeout %v", c.GetConnectTimeout())
		}
		if c := cluster(t, got, "outbound|9080|v1|reviews.shop.svc.cluster.local"); c.GetPerConnectionBufferLimitBytes() != nil {
			t.Error("subset v1 merged")
		}
		if c := cluster(t, got, "inbound|9080||"); c.GetConnectTimeout().AsDuration().Seconds() != 2 {
			t.Errorf("inbound connect timeout %v", c.GetConnectTimeout())
		}
		if gentest.ByName(got, typeurl.Cluster, "outbound|443||api.payments.example").Message != nil {
			t.Error("payments cluster not removed")
		}
		cluster(t, got, "ratelimit")
	}},
	{"cluster-merge-gateway-any", ingress, envoyFilter("istio-system", "f", `
configPatches:
- applyTo: CLUSTER
  match: {cluster: {service: frontend.web.svc.cluster.local}}
  patch: {operation: MERGE, value: {connect_timeout: 4s}}`), func(t *testing.T, got *build.Output) {
		if c := cluster(t, got, "outbound|8080||frontend.web.svc.cluster.local"); c.GetConnectTimeout().AsDuration().Seconds() != 4 {
			t.Errorf("connect timeout %v", c.GetConnectTimeout())
		}
	}},
	{"priority-and-root-namespace-order", reviews, envoyFilter("istio-system", "root", `
priority: 10
configPatches:
- {applyTo: CLUSTER, match: {cluster: {name: "inbound|9080||"}}, patch: {operation: MERGE, value: {connect_timeout: 10s}}}`) +
		envoyFilter("shop", "ns-first", `
priority: -1
configPatches:
- {applyTo: CLUSTER, match: {cluster: {name: "inbound|9080||"}}, patch: {operation: MERGE, value: {connect_timeout: 1s, per_connection_buffer_limit_bytes: 1}}}`) +
		envoyFilter("istio-system", "root-same-priority", `
configPatches:
- {applyTo: CLUSTER, match: {cluster: {name: "inbound|9080||"}}, patch: {operation: MERGE, value: {per_connection_buffer_limit_bytes: 2}}}`) +
		envoyFilter("shop", "ns-same-priority", `
configPatches:
- {applyTo: CLUSTER, match: {cluster: {name: "inbound|9080||"}}, patch: {operation: MERGE, value: {per_connection_buffer_limit_bytes: 3}}}`),
		func(t *testing.T, got *build.Output) {
			// -1 (shop) < 0 (root, then shop) < 10 (root): the last MERGE wins.
			c := cluster(t, got, "inbound|9080||")
			if c.GetConnectTimeout().AsDuration().Seconds() != 10 || c.GetPerConnectionBufferLimitBytes().GetValue() != 3 {
				t.Errorf("connect timeout %v, buffer %v", c.GetConnectTimeout(), c.GetPerConnectionBufferLimitBytes())
			}
		}},
	{"workload-selector-other-namespace-and-version", reviews, envoyFilter("shop", "other-app", `
workloadSelector: {labels: {app: ratings}}
configPatches:
- {applyTo: CLUSTER, patch: {operation: MERGE, value: {connect_timeout: 9s}}}`) +
		envoyFilter("web", "other-namespace", `
configPatches:
- {applyTo: CLUSTER, patch: {operation: MERGE, value: {connect_timeout: 9s}}}`) +
		envoyFilter("shop", "old-proxies", `
configPatches:
- {applyTo: CLUSTER, match: {proxy: {proxyVersion: '^1\.1[0-9].*'}}, patch: {operation: MERGE, value: {connect_timeout: 9s}}}`),
		func(t *testing.T, got *build.Output) {
			for _, r := range got.Resources[typeurl.Cluster] {
				if r.Message.(*clusterv3.Cluster).GetConnectTimeout().AsDuration().Seconds() == 9 {
					t.Errorf("%s patched", r.Name)
				}
			}
		}},
	{"failed-merge-is-reported", reviews, envoyFilter("shop", "bad", `
configPatches:
- applyTo: NETWORK_FILTER
  match: {context: SIDECAR_OUTBOUND, listener: {name: 10.96.0.11_5432, filterChain: {filter: {name: envoy.filters.network.tcp_proxy}}}}
  patch: {operation: MERGE, value: {typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit, stat_prefix: x}}}`),
		func(t *testing.T, got *build.Output) {
			if got.PatchFailures != 1 || !slices.ContainsFunc(got.Problems, func(p mesh.Problem) bool {
				return p.Resource == "c1:EnvoyFilter shop/bad" && p.Field == "spec.configPatches[0]" && strings.Contains(p.Reason, "cannot merge")
			}) {
				t.Errorf("failures %d, problems %v", got.PatchFailures, got.Problems)
			}
		}},
	// Auto-mTLS clusters carry only the tlsMode-istio match (decision 055):
	// matches merged after it would be reached by plain-text endpoints,
	// where Istio appends them after a match-all that hides them.
	{"failed-merge-transport-socket-matches-is-reported", reviews, envoyFilter("shop", "matches", `
configPatches:
- applyTo: CLUSTER
  match: {context: SIDECAR_OUTBOUND, cluster: {service: ratings.shop.svc.cluster.local, portNumber: 9080}}
  patch: {operation: MERGE, value: {transport_socket_matches: [{name: extra, match: {}, transport_socket: {name: envoy.transport_sockets.raw_buffer}}]}}`),
		func(t *testing.T, got *build.Output) {
			c := cluster(t, got, "outbound|9080||ratings.shop.svc.cluster.local")
			if m := c.GetTransportSocketMatches(); len(m) != 1 || m[0].GetName() != "tlsMode-istio" {
				t.Errorf("transport socket matches %v, want tlsMode-istio alone", m)
			}
			if got.PatchFailures != 1 || !slices.ContainsFunc(got.Problems, func(p mesh.Problem) bool {
				return p.Resource == "c1:EnvoyFilter shop/matches" && strings.Contains(p.Reason, "transport_socket_matches cannot be merged")
			}) {
				t.Errorf("failures %d, problems %v", got.PatchFailures, got.Problems)
			}
		}},
}

// TestPatches applies each case's EnvoyFilters to gentest.Mesh for one
// proxy: what it changed passes the check and equals the golden file
// testdata/golden/CASE.json, and every resource still validates (deeply,
// into typed configs). The golden file lists only what differs from the
// generation without EnvoyFilters; patching leaves shared messages alone.
func TestPatches(t *testing.T) {
	base := gentest.Snapshot(t, map[string]string{"c1": gentest.Mesh})
	for _, tc := range patchCases {
		t.Run(tc.name, func(t *testing.T) {
			snap := gentest.Snapshot(t, map[string]string{"c1": gentest.Mesh + tc.yaml})
			before, got := gen.Envoy(base, tc.key), gen.Envoy(snap, tc.key)
			gentest.ValidateAll(t, got)
			gentest.ValidateDeep(t, got)
			tc.check(t, got)
			golden := changes(t, before, got)
			checkGolden(t, tc.name+".json", golden)
			// Generated messages may be shared (memoized per snapshot):
			// patching never changes them, so a second generation is the same.
			if again := changes(t, before, gen.Envoy(snap, tc.key)); !bytes.Equal(again, golden) {
				t.Error("a second generation from the same snapshot differs: patching changed a shared message")
			}
		})
	}
}

// changes renders what got has that before has not: each added or
// changed resource, each removed one's name, and the problems.
func changes(t *testing.T, before, got *build.Output) []byte {
	t.Helper()
	doc := struct {
		Changed  map[string]map[string]json.RawMessage `json:"changed"`
		Removed  map[string][]string                   `json:"removed,omitempty"`
		Problems []mesh.Problem                        `json:"problems"`
	}{Changed: map[string]map[string]json.RawMessage{}, Removed: map[string][]string{}, Problems: got.Problems}
	for typeURL, rs := range got.Resources {
		for _, r := range rs {
			// Compared as JSON: Any bytes hold maps in no fixed order.
			b, err := protojson.Marshal(r.Message)
			if err != nil {
				t.Fatal(err)
			}
			if old := gentest.ByName(before, typeURL, r.Name).Message; old != nil {
				if ob, _ := protojson.Marshal(old); bytes.Equal(ob, b) {
					continue
				}
			}
			var v json.RawMessage
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatal(err)
			}
			if doc.Changed[typeURL] == nil {
				doc.Changed[typeURL] = map[string]json.RawMessage{}
			}
			doc.Changed[typeURL][r.Name] = v
		}
	}
	for typeURL, rs := range before.Resources {
		for _, r := range rs {
			if gentest.ByName(got, typeURL, r.Name).Message == nil {
				doc.Removed[typeURL] = append(doc.Removed[typeURL], r.Name)
			}
		}
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	gentest.CheckGolden(t, filepath.Join("testdata", "golden", name), got, *update, "go test ./xds/gen/patch/ -run TestPatches -update")
}

func count(out *build.Output, typeURL, name string) int {
	n := 0
	for _, r := range out.Resources[typeURL] {
		if r.Name == name {
			n++
		}
	}
	return n
}

func listener(t *testing.T, out *build.Output, name string) *listenerv3.Listener {
	t.Helper()
	l, ok := gentest.ByName(out, typeurl.Listener, name).Message.(*listenerv3.Listener)
	if !ok {
		t.Fatalf("no listener %s", name)
	}
	return l
}

func cluster(t *testing.T, out *build.Output, name string) *clusterv3.Cluster {
	t.Helper()
	c, ok := gentest.ByName(out, typeurl.Cluster, name).Message.(*clusterv3.Cluster)
	if !ok {
		t.Fatalf("no cluster %s", name)
	}
	return c
}

func routeConfig(t *testing.T, out *build.Output, name string) *routev3.RouteConfiguration {
	t.Helper()
	rc, ok := gentest.ByName(out, typeurl.Route, name).Message.(*routev3.RouteConfiguration)
	if !ok {
		t.Fatalf("no route configuration %s", name)
	}
	return rc
}

func chain(t *testing.T, l *listenerv3.Listener, name string) *listenerv3.FilterChain {
	t.Helper()
	for _, fc := range append(slices.Clone(l.GetFilterChains()), l.GetDefaultFilterChain()) {
		if fc != nil && fc.GetName() == name {
			return fc
		}
	}
	t.Fatalf("listener %s has no filter chain %s", l.GetName(), name)
	return nil
}

// hcm returns the chain's HTTP connection manager, nil if it has none.
func hcm(t *testing.T, fc *listenerv3.FilterChain) *hcmv3.HttpConnectionManager {
	t.Helper()
	for _, f := range fc.GetFilters() {
		if f.GetName() == build.HTTPConnectionManagerFilter {
			h := &hcmv3.HttpConnectionManager{}
			if err := f.GetTypedConfig().UnmarshalTo(h); err != nil {
				t.Fatal(err)
			}
			return h
		}
	}
	return nil
}

func filterNames(fc *listenerv3.FilterChain) []string {
	var names []string
	for _, f := range fc.GetFilters() {
		names = append(names, f.GetName())
	}
	return names
}

func httpFilterNames(h *hcmv3.HttpConnectionManager) []string {
	var names []string
	for _, f := range h.GetHttpFilters() {
		names = append(names, f.GetName())
	}
	return names
}

func vhostNames(rc *routev3.RouteConfiguration) []string {
	var names []string
	for _, vh := range rc.GetVirtualHosts() {
		names = append(names, vh.GetName())
	}
	return names
}

// frontendInShop is a sidecar of namespace shop that no workloadSelector
// of app=reviews selects.
var frontendInShop = proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "shop", Labels: "app=other", IPs: "10.1.9.9",
	Locality: mesh.ParseLocality("us-east/a")}
