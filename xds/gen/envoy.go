package gen

import (
	"strconv"

	networking "istio.io/api/networking/v1alpha3"

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

// TrafficPolicyFor merges a DestinationRule's traffic policies for one
// port and subset, Istio's way: the subset's policy overrides the
// top-level one field by field (load balancer, connection pool, outlier
// detection, TLS as wholes), and within each, port-level settings for the
// port override the policy's own. Nil when dr is nil.
func TrafficPolicyFor(dr *networking.DestinationRule, port uint32, subset string) *networking.TrafficPolicy {
	if dr == nil {
		return nil
	}
	out := applyPortLevel(dr.GetTrafficPolicy(), port)
	if subset != "" {
		for _, ss := range dr.GetSubsets() {
			if ss.GetName() == subset && ss.GetTrafficPolicy() != nil {
				out = overlayPolicy(out, applyPortLevel(ss.GetTrafficPolicy(), port))
			}
		}
	}
	return out
}

// applyPortLevel returns p with the port-level settings for port applied.
func applyPortLevel(p *networking.TrafficPolicy, port uint32) *networking.TrafficPolicy {
	if p == nil {
		return nil
	}
	out := &networking.TrafficPolicy{
		LoadBalancer:     p.GetLoadBalancer(),
		ConnectionPool:   p.GetConnectionPool(),
		OutlierDetection: p.GetOutlierDetection(),
		Tls:              p.GetTls(),
		Tunnel:           p.GetTunnel(),
		ProxyProtocol:    p.GetProxyProtocol(),
	}
	for _, pl := range p.GetPortLevelSettings() {
		if pl.GetPort().GetNumber() != port {
			continue
		}
		if pl.GetLoadBalancer() != nil {
			out.LoadBalancer = pl.GetLoadBalancer()
		}
		if pl.GetConnectionPool() != nil {
			out.ConnectionPool = pl.GetConnectionPool()
		}
		if pl.GetOutlierDetection() != nil {
			out.OutlierDetection = pl.GetOutlierDetection()
		}
		if pl.GetTls() != nil {
			out.Tls = pl.GetTls()
		}
	}
	return out
}

// overlayPolicy returns base with every field over sets replaced.
func overlayPolicy(base, over *networking.TrafficPolicy) *networking.TrafficPolicy {
	if base == nil {
		return over
	}
	out := &networking.TrafficPolicy{
		LoadBalancer:     base.GetLoadBalancer(),
		ConnectionPool:   base.GetConnectionPool(),
		OutlierDetection: base.GetOutlierDetection(),
		Tls:              base.GetTls(),
		Tunnel:           base.GetTunnel(),
		ProxyProtocol:    base.GetProxyProtocol(),
	}
	if over.GetLoadBalancer() != nil {
		out.LoadBalancer = over.GetLoadBalancer()
	}
	if over.GetConnectionPool() != nil {
		out.ConnectionPool = over.GetConnectionPool()
	}
	if over.GetOutlierDetection() != nil {
		out.OutlierDetection = over.GetOutlierDetection()
	}
	if over.GetTls() != nil {
		out.Tls = over.GetTls()
	}
	if over.GetTunnel() != nil {
		out.Tunnel = over.GetTunnel()
	}
	if over.GetProxyProtocol() != nil {
		out.ProxyProtocol = over.GetProxyProtocol()
	}
	return out
}
