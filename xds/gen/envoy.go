package gen

import (
	"strconv"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
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

// envoyGenerators are the Envoy generators by type URL (Istio registers
// its own the same way), each building every resource of its type for the
// proxy a View scopes.
var envoyGenerators = map[string]func(*scope.View) []Resource{
	typeurl.Cluster:  Clusters,
	typeurl.Endpoint: Endpoints,
	typeurl.Listener: Listeners,
	typeurl.Route:    Routes,
}

// Envoy generates every resource for an Envoy proxy with the given key
// (sidecar or router). It is a pure function of (snapshot, key).
func Envoy(s *mesh.Snapshot, key proxy.Key) *Output {
	v := scope.New(s, key)
	return generateEnvoy(v, &Output{Resources: make(map[string][]Resource, len(Types))}, Types)
}

// EnvoyEndpointsChanged generates for key what a change to the endpoints
// of hosts alone can alter: the assignments of those hosts' clusters (of
// those visible to key), and every resource of types, which the caller
// names among the others that read endpoints (clusters of DNS services
// hold theirs inline; the proxy's inbound ports come from the endpoints
// at its IPs). It is a pure function of its arguments.
func EnvoyEndpointsChanged(s *mesh.Snapshot, key proxy.Key, hosts map[string]bool, types ...string) *Output {
	v := scope.New(s, key)
	out := &Output{Resources: map[string][]Resource{typeurl.Endpoint: EndpointsOf(v, hosts)}}
	return generateEnvoy(v, out, types)
}

// generateEnvoy adds to out every resource of types for v's proxy, each
// type sorted by name, and the problems met.
func generateEnvoy(v *scope.View, out *Output, types []string) *Output {
	for _, t := range types {
		rs := envoyGenerators[t](v)
		build.SortByName(rs)
		out.Resources[t] = rs
	}
	out.Problems = v.Problems().List()
	return out
}

// IsHTTP reports whether a service port protocol (upper case, Istio's
// names) carries HTTP: HTTP, HTTP2, GRPC and GRPC-WEB.
func IsHTTP(protocol string) bool {
	switch protocol {
	case "HTTP", "HTTP2", "GRPC", "GRPC-WEB":
		return true
	}
	return false
}

// IsHTTP2 reports whether a protocol needs HTTP/2 upstream (HTTP2, GRPC).
func IsHTTP2(protocol string) bool {
	return protocol == "HTTP2" || protocol == "GRPC"
}

// IsTLS reports whether a port carries TLS the sidecar routes by SNI
// without terminating it (TLS, HTTPS).
func IsTLS(protocol string) bool {
	return protocol == "TLS" || protocol == "HTTPS"
}
