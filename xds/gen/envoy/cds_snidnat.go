package envoy

import (
	"strings"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// SNI-DNAT clusters are what a router's AUTO_PASSTHROUGH servers forward
// to (Istio's name for them): one per outbound cluster of every mesh
// service an AUTO_PASSTHROUGH server's hosts match, named by the SNI a
// mesh client sends for that cluster (IstioMutualSNI,
// "outbound_.PORT_.SUBSET_.HOST"), with no TLS of the router's own (the
// client's mTLS passes through to the destination's sidecar) and, for
// EDS, only the endpoints that accept mesh mTLS: a connection the gateway
// cannot inspect must not reach a workload in plain text.

// autoPassthroughHosts are the hosts of an AUTO_PASSTHROUGH server with
// their namespace part left out (Istio reads them so: there is no
// VirtualService for the namespace to restrict).
func autoPassthroughHosts(srv *networking.Server) []string {
	out := make([]string, 0, len(srv.GetHosts()))
	for _, h := range srv.GetHosts() {
		if _, host, ok := strings.Cut(h, "/"); ok {
			h = host
		}
		out = append(out, h)
	}
	return out
}

// routerAutoPassthroughHosts are the hosts of every AUTO_PASSTHROUGH
// server of the Gateways selecting a router; nil for other proxies.
func routerAutoPassthroughHosts(v *scope.View) []string {
	if v.Key().Type != proxy.Router {
		return nil
	}
	var out []string
	for _, gw := range v.Gateways() {
		spec, _ := gw.Object.Spec.(*networking.Gateway)
		for _, srv := range spec.GetServers() {
			if srv.GetTls().GetMode() == networking.ServerTLSSettings_AUTO_PASSTHROUGH {
				out = append(out, autoPassthroughHosts(srv)...)
			}
		}
	}
	return out
}

// autoPassthroughService reports whether an AUTO_PASSTHROUGH server with
// these hosts forwards to svc: a mesh service (not MESH_EXTERNAL) whose
// host one of them matches.
func autoPassthroughService(hosts []string, svc *mesh.Service) bool {
	if svc.External {
		return false
	}
	for _, h := range hosts {
		if scope.HostMatches(h, svc.Hostname) {
			return true
		}
	}
	return false
}

// sniDNATCluster reports whether an outbound cluster has an SNI-DNAT
// twin: not for UDP ports, nor for original-destination clusters (the
// original destination of a connection to the gateway is the gateway).
func sniDNATCluster(oc *outboundCluster) bool {
	return oc.kind != kindOriginalDst && !strings.EqualFold(oc.Port.Protocol, "UDP")
}
