package gen

import (
	"strconv"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
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

// Envoy generates every resource for an Envoy proxy with the given key
// (sidecar or router). It is a pure function of (snapshot, key).
func Envoy(s *mesh.Snapshot, key proxy.Key) *Output {
	v := NewView(s, key)
	out := &Output{Resources: map[string][]Resource{
		typeurl.Cluster:  v.Clusters(),
		typeurl.Endpoint: v.Endpoints(),
		typeurl.Listener: v.Listeners(),
		typeurl.Route:    v.Routes(),
	}}
	for _, rs := range out.Resources {
		build.SortByName(rs)
	}
	out.Problems = v.Problems()
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
