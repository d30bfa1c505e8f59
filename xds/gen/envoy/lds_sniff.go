package envoy

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	httpinspectorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/http_inspector/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/policy"
)

// Protocol sniffing, as Istio does it for ports whose protocol is not
// declared (isSniffed): the http_inspector listener filter reads the
// client's first bytes and reports plain-text HTTP as an application
// protocol ("http/1.0", "http/1.1", "h2c"); a filter chain matching those
// takes the connection into an HTTP connection manager (routes, retries,
// L7 authorization), and a chain without that match proxies anything else
// as TCP. Outbound listeners have no tls_inspector: the ALPN of the
// application's own TLS must not pick the HTTP chain (Envoy does not
// backtrack from a transport match, so matching raw_buffer would need a
// TCP chain per transport), and http_inspector finds no HTTP in TLS
// bytes. Inbound, mesh mTLS is told apart by tls_inspector and its ALPN
// (inboundSniffedChains). The wait for the first bytes is
// MeshConfig protocolDetectionTimeout (Istio's default 0: no limit);
// when it runs out the connection continues as TCP.

// HTTPInspectorFilter is the listener filter that detects HTTP.
const HTTPInspectorFilter = "envoy.filters.listener.http_inspector"

// plaintextHTTPALPN are the application protocols http_inspector reports
// for plain-text HTTP (Istio's plaintextHTTPALPNs).
var plaintextHTTPALPN = []string{"http/1.0", "http/1.1", "h2c"}

// meshHTTPALPN are the ALPN values Istio's sidecars offer when they
// originate mTLS for HTTP (Istio's mtlsHTTPALPNs): an inbound sniffed
// port takes mTLS connections offering one of them as HTTP. nave's own
// sidecars offer "istio" (decision 041), which an undeclared inbound
// port proxies as TCP.
var meshHTTPALPN = []string{"istio-http/1.0", "istio-http/1.1", "istio-h2"}

// meshTCPALPN are the other mesh ALPN values (meshALPN without
// meshHTTPALPN: Envoy refuses two chains matching the same value).
var meshTCPALPN = []string{"istio-peer-exchange", "istio"}

func (b *listenerBuilder) httpInspector() *listenerv3.ListenerFilter {
	if b.httpInspect == nil {
		b.httpInspect = &listenerv3.ListenerFilter{
			Name:       HTTPInspectorFilter,
			ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: build.Any(&httpinspectorv3.HttpInspector{})},
		}
	}
	return b.httpInspect
}

// detectionTimeout sets how long l's listener filters wait for the
// client's first bytes (MeshConfig protocolDetectionTimeout; 0 waits as
// long as the client takes) and that the connection then goes on, as
// Istio sets it.
func (b *listenerBuilder) detectionTimeout(l *listenerv3.Listener) {
	l.ListenerFiltersTimeout = durationpb.New(b.v.Snapshot().ProtocolDetectionTimeout())
	l.ContinueOnListenerFiltersTimeout = true
}

// sniffedListener is an outbound listener for a port whose protocol is
// sniffed: plain-text HTTP goes through an HTTP connection manager with
// the route configuration routeName, anything else to tcp.
func (b *listenerBuilder) sniffedListener(name, address string, port uint32, routeName string, tcp *listenerv3.Filter) *listenerv3.Listener {
	l := listener(name, address, port, false, corev3.TrafficDirection_OUTBOUND)
	l.ListenerFilters = []*listenerv3.ListenerFilter{b.httpInspector()}
	b.detectionTimeout(l)
	l.FilterChains = []*listenerv3.FilterChain{
		{
			Name:             name + "_http",
			FilterChainMatch: &listenerv3.FilterChainMatch{ApplicationProtocols: plaintextHTTPALPN},
			Filters:          []*listenerv3.Filter{b.rdsHCM("outbound_"+name, routeName, b.outboundHTTPFilters, false)},
		},
		{Name: name + "_tcp", Filters: []*listenerv3.Filter{tcp}},
	}
	return l
}

// inboundSniffedChains builds the chains of one inbound port whose
// protocol is sniffed, for its effective mTLS mode (as inboundChains does
// for declared ports): HTTP when the connection is plain-text HTTP
// (http_inspector) or mTLS whose ALPN says HTTP (meshHTTPALPN), TCP
// otherwise. Every chain names its transport: Envoy does not backtrack
// from a transport match to a chain that leaves it open. The chains need
// the tls_inspector and the http_inspector.
func (b *listenerBuilder) inboundSniffedChains(name string, match func() *listenerv3.FilterChainMatch, mode policy.MTLSMode,
	http, tcp func() []*listenerv3.Filter) []*listenerv3.FilterChain {
	with := func(transport string, alpn []string) *listenerv3.FilterChainMatch {
		m := match()
		m.TransportProtocol, m.ApplicationProtocols = transport, alpn
		return m
	}
	mtlsHTTP := &listenerv3.FilterChain{Name: name + "mtls_http", FilterChainMatch: with(transportTLS, meshHTTPALPN), TransportSocket: b.inboundMTLS(true), Filters: http()}
	plainHTTP := &listenerv3.FilterChain{Name: name + "http", FilterChainMatch: with(transportRaw, plaintextHTTPALPN), Filters: http()}
	switch mode {
	case policy.MTLSStrict:
		// mTLS not offering an HTTP ALPN is TCP; plain text fails the
		// handshake, as on a declared port.
		return []*listenerv3.FilterChain{
			mtlsHTTP,
			{Name: name + "mtls", FilterChainMatch: with(transportTLS, nil), TransportSocket: b.inboundMTLS(false), Filters: tcp()},
			{Name: name, FilterChainMatch: with(transportRaw, nil), TransportSocket: b.inboundMTLS(false), Filters: tcp()},
		}
	case policy.MTLSDisable:
		return []*listenerv3.FilterChain{
			plainHTTP,
			{Name: name, FilterChainMatch: with(transportRaw, nil), Filters: tcp()},
			{Name: name + "tls", FilterChainMatch: with(transportTLS, nil), Filters: tcp()},
		}
	}
	return []*listenerv3.FilterChain{
		mtlsHTTP,
		{Name: name + "mtls", FilterChainMatch: with(transportTLS, meshTCPALPN), TransportSocket: b.inboundMTLS(false), Filters: tcp()},
		{Name: name + "tls", FilterChainMatch: with(transportTLS, nil), Filters: tcp()},
		plainHTTP,
		{Name: name, FilterChainMatch: with(transportRaw, nil), Filters: tcp()},
	}
}
