// Package envoy generates the xDS resources of one Envoy proxy, sidecar
// or router (gateway), from the View that scopes a snapshot to it: one
// generator per type URL — Clusters (cds*.go), Endpoints (eds*.go),
// Listeners (lds*.go) and Routes (rds*.go) — each a function of the View
// alone (invariant 6), building through a builder of its own that shares
// read-only sub-messages between the resources of one call. Route
// translation is the routes room's, policy semantics the policy room's.
//
// Every function is safe to call from any number of goroutines on
// different Views; a View, and so one generation, belongs to one.
package envoy

import (
	"strconv"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/patch"
	"github.com/navemesh/nave/xds/gen/scope"
)

// Names of Envoy resources, following Istio's so that operators' tooling
// (istioctl-style dashboards, log parsers) reads them the same way.
const (
	// VirtualOutboundListener captures all outbound traffic (iptables
	// redirects it to port 15001) and hands it to the listener of the
	// original destination.
	VirtualOutboundListener = "virtualOutbound"
	VirtualOutboundPort     = 15001
	// VirtualInboundListener receives all inbound traffic (port 15006).
	VirtualInboundListener = "virtualInbound"
	VirtualInboundPort     = 15006
)

// OutboundListenerName names a sidecar's outbound listener for a port on
// an address ("0.0.0.0_8080", or "10.0.0.1_3306" for a TCP service VIP).
func OutboundListenerName(address string, port uint32) string {
	return address + "_" + strconv.FormatUint(uint64(port), 10)
}

// SidecarRouteName names a sidecar's outbound HTTP route configuration for
// a port: "8080".
func SidecarRouteName(port uint32) string {
	return strconv.FormatUint(uint64(port), 10)
}

// SniffedRouteName names a sidecar's outbound route configuration for one
// service's port whose protocol is sniffed, as Istio does:
// "HOSTNAME:PORT". It holds that service's virtual host alone, since the
// service's own address takes the connection.
func SniffedRouteName(hostname string, port uint32) string {
	return hostname + ":" + strconv.FormatUint(uint64(port), 10)
}

// GatewayHTTPRouteName names the route configuration of a gateway's plain
// HTTP servers on a port: "http.8080".
func GatewayHTTPRouteName(port uint32) string {
	return "http." + strconv.FormatUint(uint64(port), 10)
}

// GatewayHTTPSRouteName names the route configuration of one TLS-terminated
// (SIMPLE/MUTUAL) server of a gateway: "https.443.NAME.GATEWAY.NAMESPACE",
// NAME being the server's name or its index.
func GatewayHTTPSRouteName(port uint32, server, gateway, namespace string) string {
	return "https." + strconv.FormatUint(uint64(port), 10) + "." + server + "." + gateway + "." + namespace
}

// generators are the Envoy generators by type URL (Istio registers its
// own the same way), each building every resource of its type for the
// proxy a View scopes.
var generators = map[string]func(*scope.View) []build.Resource{
	typeurl.Cluster:  Clusters,
	typeurl.Endpoint: Endpoints,
	typeurl.Listener: Listeners,
	typeurl.Route:    Routes,
}

// Generate generates every resource of types, in that order, for the
// proxy v scopes, each type's resources sorted by name and patched by the
// EnvoyFilters that apply to it (xds/gen/patch, the one stage after
// generation), with the problems met so far scoping, generating and
// patching for v. Types other than Cluster, Endpoint, Listener and Route
// have no generator here and are left out.
func Generate(v *scope.View, types ...string) *build.Output {
	out := &build.Output{Resources: make(map[string][]build.Resource, len(types))}
	patches := patch.For(v.Snapshot(), v.Key(), v.Labels(), v.Problems())
	for _, t := range types {
		if gen := generators[t]; gen != nil {
			rs := gen(v)
			build.SortByName(rs)
			out.Resources[t] = patches.Apply(t, rs)
		}
	}
	out.Problems = v.Problems().List()
	out.PatchFailures = patches.Failures()
	return out
}

// isHTTP reports whether a service port protocol (upper case, Istio's
// names) carries HTTP: HTTP, HTTP2, GRPC and GRPC-WEB.
func isHTTP(protocol string) bool {
	switch protocol {
	case "HTTP", "HTTP2", "GRPC", "GRPC-WEB":
		return true
	}
	return false
}

// isSniffed reports whether a port's protocol is undeclared (no name
// prefix, appProtocol or ServiceEntry protocol Istio knows): as in
// Istio, the sidecar detects HTTP on it (http_inspector) and proxies
// anything else as TCP (lds_sniff.go).
func isSniffed(protocol string) bool {
	return protocol == ""
}

// isHTTP2 reports whether a protocol needs HTTP/2 upstream (HTTP2, GRPC).
func isHTTP2(protocol string) bool {
	return protocol == "HTTP2" || protocol == "GRPC"
}

// isTLS reports whether a port carries TLS the sidecar routes by SNI
// without terminating it (TLS, HTTPS).
func isTLS(protocol string) bool {
	return protocol == "TLS" || protocol == "HTTPS"
}
