package build

import (
	"strconv"

	"github.com/navemesh/nave/shared/xdsbootstrap"
)

// Names of resources, filters and secrets more than one room refers to.
// They follow Istio's, so that operators' tooling (istioctl-style
// dashboards, log parsers) reads them the same way.

// ClusterName is Istio's naming for an outbound cluster:
// "outbound|PORT|SUBSET|HOST".
func ClusterName(host string, port uint32, subset string) string {
	return "outbound|" + strconv.FormatUint(uint64(port), 10) + "|" + subset + "|" + host
}

// InboundClusterName names the inbound cluster of a workload port:
// "inbound|PORT||".
func InboundClusterName(port uint32) string {
	return "inbound|" + strconv.FormatUint(uint64(port), 10) + "||"
}

// Clusters every Envoy proxy has besides its services': one that drops
// what it gets, and two that forward to the original destination of
// outbound and of inbound traffic. Routes name BlackHoleCluster for
// destinations that cannot be resolved.
const (
	BlackHoleCluster          = "BlackHoleCluster"
	PassthroughCluster        = "PassthroughCluster"
	InboundPassthroughCluster = "InboundPassthroughCluster"
)

// Filter and transport socket names, as Envoy and grpc-go know them.
const (
	HTTPConnectionManagerFilter = "envoy.filters.network.http_connection_manager"
	FaultFilter                 = "envoy.filters.http.fault"
	CorsFilter                  = "envoy.filters.http.cors"
	RouterFilter                = "envoy.filters.http.router"
	TLSTransportSocket          = "envoy.transport_sockets.tls"
)

// Names of the SDS secrets a proxy's own workload identity comes in
// (Istio's names, served over ADS by the security part; proxyless gRPC
// uses them as certificate names).
const (
	WorkloadCertSecret = xdsbootstrap.WorkloadCertSecret
	RootCASecret       = xdsbootstrap.RootCASecret
	// CACertSuffix names the CA bundle of a credentialName (Istio's
	// "-cacert").
	CACertSuffix = xdsbootstrap.CACertSuffix
)
