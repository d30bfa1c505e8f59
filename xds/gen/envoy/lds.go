package envoy

import (
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	origdstv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_dst/v3"
	tlsinspectorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/policy"
	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// Envoy filter names the listeners use.
const (
	TCPProxyFilter     = "envoy.filters.network.tcp_proxy"
	TLSInspectorFilter = "envoy.filters.listener.tls_inspector"
	OriginalDstFilter  = "envoy.filters.listener.original_dst"
)

// Listeners generates the proxy's listeners: for a sidecar the outbound
// listeners (one per HTTP port, per TCP service VIP and port, per TLS port),
// virtualOutbound and virtualInbound; for a router one listener per port of
// the Gateway servers that select it. Proxyless clients get none here.
func Listeners(v *scope.View) []build.Resource {
	b := newListenerBuilder(v)
	switch v.Key().Type {
	case proxy.Sidecar:
		b.sidecarOutbound()
		b.virtualOutbound()
		b.virtualInbound()
	case proxy.Router:
		b.gateways()
	}
	return b.out
}

// listenerBuilder holds what one Listeners call shares between listeners:
// the typed configs that are the same for every listener of the call are
// built (and marshalled into Any) once per call, those that are the same
// for every proxy once for the process. It belongs to one goroutine.
type listenerBuilder struct {
	v        *scope.View
	problems *build.Problems
	out      []build.Resource
	// security is what the workload's policies put into its inbound
	// chains (built on first use).
	security *inboundFilters
	// outboundHTTPFilters is fault, cors, router (see the conventions in
	// the package: routes configure fault and CORS per route).
	outboundHTTPFilters []*hcmv3.HttpFilter
	routerFilter        *hcmv3.HttpFilter
	tlsInspector        *listenerv3.ListenerFilter
	httpInspect         *listenerv3.ListenerFilter // built on first use
	// mtlsHTTP and mtlsTCP terminate inbound mesh mTLS (built on first use).
	mtlsHTTP, mtlsTCP *corev3.TransportSocket
	// gatewayMTLS terminate mesh mTLS on ISTIO_MUTUAL gateway servers, TLS
	// [0] and HTTPS [1] (built on first use; gatewayMeshTLS).
	gatewayMTLS [2]*corev3.TransportSocket
	// tele is each side's telemetry (built on first use).
	tele [2]*sideTelemetry
}

// The filters whose configuration is the same for every proxy, their
// typed configs marshalled once for the process (Istio keeps the same as
// package variables): read-only, shared by every generation as any
// generated message may be (EnvoyFilter patches work on copies).
var (
	routerHTTPFilter = &hcmv3.HttpFilter{Name: build.RouterFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: build.Any(&routerv3.Router{})}}
	// sidecarOutboundHTTPFilters is fault, cors, router; capped, so that
	// an append copies.
	sidecarOutboundHTTPFilters = []*hcmv3.HttpFilter{
		{Name: build.FaultFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: build.Any(&faultv3.HTTPFault{})}},
		{Name: build.CorsFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: build.Any(&corsv3.Cors{})}},
		routerHTTPFilter,
	}[:3:3]
	tlsInspectorFilter = &listenerv3.ListenerFilter{
		Name:       TLSInspectorFilter,
		ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: build.Any(&tlsinspectorv3.TlsInspector{})},
	}
	originalDstListenerFilter = &listenerv3.ListenerFilter{
		Name:       OriginalDstFilter,
		ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: build.Any(&origdstv3.OriginalDst{})},
	}
)

func newListenerBuilder(v *scope.View) *listenerBuilder {
	return &listenerBuilder{
		v:                   v,
		problems:            v.Problems(),
		outboundHTTPFilters: sidecarOutboundHTTPFilters,
		routerFilter:        routerHTTPFilter,
		tlsInspector:        tlsInspectorFilter,
	}
}

func (b *listenerBuilder) add(l *listenerv3.Listener) {
	b.addTCPStats(l)
	b.out = append(b.out, build.Resource{Name: l.Name, Message: l})
}

// listener returns an empty listener on address:port.
func listener(name, address string, port uint32, bind bool, dir corev3.TrafficDirection) *listenerv3.Listener {
	return &listenerv3.Listener{
		Name:             name,
		Address:          build.SocketAddress(address, port),
		BindToPort:       wrapperspb.Bool(bind),
		TrafficDirection: dir,
	}
}

// rdsHCM is an HTTP connection manager whose routes come over ADS, with
// the client side's telemetry (outbound and gateway listeners).
func (b *listenerBuilder) rdsHCM(statPrefix, routeName string, filters []*hcmv3.HttpFilter, edge bool) *listenerv3.Filter {
	hcm := &hcmv3.HttpConnectionManager{
		CodecType:  hcmv3.HttpConnectionManager_AUTO,
		StatPrefix: statPrefix,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    build.ADSConfigSource(),
			RouteConfigName: routeName,
		}},
		HttpFilters: filters,
	}
	if edge {
		// A gateway is the edge: the peer's address is the client's
		// (Envoy docs, "HTTP connection management > IP address
		// detection": use_remote_address).
		hcm.UseRemoteAddress = wrapperspb.Bool(true)
	}
	b.telemetry(policy.ClientSide).applyHTTP(hcm)
	return build.HCMFilter(hcm)
}

// weightedCluster is one tcp_proxy destination.
type weightedCluster struct {
	cluster string
	weight  uint32
}

// tcpProxy forwards to one cluster, or splits connections over several by
// weight, with side's access logs.
func (b *listenerBuilder) tcpProxy(side policy.TrafficSide, statPrefix string, dests []weightedCluster) *listenerv3.Filter {
	tp := &tcpproxyv3.TcpProxy{StatPrefix: statPrefix, AccessLog: b.telemetry(side).tcpLogs}
	if len(dests) == 1 {
		tp.ClusterSpecifier = &tcpproxyv3.TcpProxy_Cluster{Cluster: dests[0].cluster}
	} else {
		wc := &tcpproxyv3.TcpProxy_WeightedCluster{Clusters: make([]*tcpproxyv3.TcpProxy_WeightedCluster_ClusterWeight, 0, len(dests))}
		for _, d := range dests {
			wc.Clusters = append(wc.Clusters, &tcpproxyv3.TcpProxy_WeightedCluster_ClusterWeight{Name: d.cluster, Weight: d.weight})
		}
		tp.ClusterSpecifier = &tcpproxyv3.TcpProxy_WeightedClusters{WeightedClusters: wc}
	}
	return &listenerv3.Filter{Name: TCPProxyFilter, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: build.Any(tp)}}
}

func (b *listenerBuilder) tcpProxyTo(side policy.TrafficSide, cluster string) *listenerv3.Filter {
	return b.tcpProxy(side, cluster, []weightedCluster{{cluster: cluster, weight: 1}})
}

func originalDstFilter() *listenerv3.ListenerFilter { return originalDstListenerFilter }

func portString(p uint32) string { return strconv.FormatUint(uint64(p), 10) }

// serviceRef names a service for problems: its first defining object.
func serviceRef(svc *mesh.Service) string {
	if len(svc.Sources) > 0 {
		return svc.Sources[0]
	}
	return svc.Hostname
}
