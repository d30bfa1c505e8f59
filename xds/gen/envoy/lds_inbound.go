package envoy

import (
	"slices"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/policy"
	"github.com/navemesh/nave/xds/mesh"
)

// inboundPort is one port the sidecar accepts inbound traffic on.
type inboundPort struct {
	port     uint32 // the destination port of the traffic
	protocol string
}

// inboundPorts are the Sidecar resource's ingress ports when it has any
// (traffic then goes to their defaultEndpoint, through the cluster
// InboundClusterName(port)), else the workload's service target ports.
func (b *listenerBuilder) inboundPortList() []inboundPort {
	v := b.v
	if sc := v.SidecarSpec(); sc != nil && len(sc.GetIngress()) > 0 {
		seen := map[uint32]bool{}
		var out []inboundPort
		for i, in := range sc.GetIngress() {
			n := in.GetPort().GetNumber()
			if seen[n] {
				b.problems.Addf(v.SidecarConfig().Ref(), "spec.ingress["+strconv.Itoa(i)+"].port", "port %d is already an ingress port", n)
				continue
			}
			seen[n] = true
			out = append(out, inboundPort{port: n, protocol: strings.ToUpper(in.GetPort().GetProtocol())})
		}
		slices.SortFunc(out, func(a, b inboundPort) int { return int(a.port) - int(b.port) })
		return out
	}
	ips := v.InboundPorts()
	out := make([]inboundPort, 0, len(ips))
	for _, p := range ips {
		out = append(out, inboundPort{port: p.TargetPort, protocol: p.Port.Protocol})
	}
	return out
}

// virtualInbound adds the listener iptables redirects inbound traffic to:
// chains per inbound port, matched on the original destination port, with
// the port's effective mTLS mode (PeerAuthentication) and the workload's
// authorization filters, and passthrough to InboundPassthroughCluster for
// ports no service declares, with the workload's mode and filters too
// (Istio enforces policies there as well).
func (b *listenerBuilder) virtualInbound() {
	l := listener(VirtualInboundListener, "0.0.0.0", VirtualInboundPort, true, corev3.TrafficDirection_INBOUND)
	l.ListenerFilters = []*listenerv3.ListenerFilter{originalDstFilter()}
	sec := b.inboundSecurityFilters()
	tcpFilters := func(cluster string) func() []*listenerv3.Filter {
		return func() []*listenerv3.Filter {
			return append(slices.Clone(sec.tcp), b.tcpProxyTo(policy.ServerSide, cluster))
		}
	}
	needInspector, sniff := false, false
	for _, p := range b.inboundPortList() {
		cluster := build.InboundClusterName(p.port)
		http := isHTTP(p.protocol)
		app := tcpFilters(cluster)
		hcm := func() []*listenerv3.Filter { return []*listenerv3.Filter{b.inboundHCM(p.port, cluster, sec.http)} }
		if http {
			app = hcm
		}
		match := func() *listenerv3.FilterChainMatch {
			return &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(p.port)}
		}
		if isSniffed(p.protocol) {
			l.FilterChains = append(l.FilterChains, b.inboundSniffedChains(cluster, match, b.mtlsMode(p.port), hcm, tcpFilters(cluster))...)
			needInspector, sniff = true, true
			continue
		}
		chains, inspect := b.inboundChains(cluster, match, b.mtlsMode(p.port), http, app, tcpFilters(cluster))
		l.FilterChains = append(l.FilterChains, chains...)
		needInspector = needInspector || inspect
	}
	passthrough := &listenerv3.FilterChain{Name: "InboundPassthroughFilterChain", Filters: tcpFilters(build.InboundPassthroughCluster)()}
	switch b.mtlsMode(0) {
	case policy.MTLSStrict:
		passthrough.TransportSocket = b.inboundMTLS(false)
	case policy.MTLSPermissive:
		// mTLS from the mesh on an undeclared port is terminated; anything
		// else (plain text, the application's own TLS) takes the default.
		l.FilterChains = append(l.FilterChains, &listenerv3.FilterChain{
			Name:             "InboundPassthroughFilterChainMTLS",
			FilterChainMatch: &listenerv3.FilterChainMatch{TransportProtocol: transportTLS, ApplicationProtocols: meshALPN},
			TransportSocket:  b.inboundMTLS(false),
			Filters:          tcpFilters(build.InboundPassthroughCluster)(),
		})
		needInspector = true
	}
	if needInspector {
		l.ListenerFilters = append(l.ListenerFilters, b.tlsInspector)
	}
	if sniff {
		l.ListenerFilters = append(l.ListenerFilters, b.httpInspector())
		b.detectionTimeout(l)
	}
	l.DefaultFilterChain = passthrough
	b.add(l)
}

// inboundHCM serves an inbound HTTP port: every request goes to the local
// workload's cluster. The route has no timeout: the caller's sidecar
// enforces the VirtualService timeout.
func (b *listenerBuilder) inboundHCM(port uint32, cluster string, security []*hcmv3.HttpFilter) *listenerv3.Filter {
	filters := make([]*hcmv3.HttpFilter, 0, len(security)+1)
	filters = append(filters, security...)
	filters = append(filters, b.routerFilter)
	hcm := &hcmv3.HttpConnectionManager{
		CodecType:  hcmv3.HttpConnectionManager_AUTO,
		StatPrefix: "inbound_0.0.0.0_" + portString(port),
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			Name: cluster,
			VirtualHosts: []*routev3.VirtualHost{{
				Name:    "inbound|http|" + portString(port),
				Domains: []string{"*"},
				Routes: []*routev3.Route{{
					Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
					Action: &routev3.Route_Route{Route: &routev3.RouteAction{
						ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster},
						Timeout:          durationpb.New(0),
					}},
				}},
			}},
			ValidateClusters: wrapperspb.Bool(false),
		}},
		HttpFilters: filters,
	}
	b.telemetry(policy.ServerSide).applyHTTP(hcm)
	return build.HCMFilter(hcm)
}

// Transport protocols and ALPN values of inbound filter chain matches.
const (
	transportTLS = "tls"
	transportRaw = "raw_buffer"
)

// meshALPN are the application protocols a mesh client offers when it
// originates mTLS (ISTIO_MUTUAL): nave's clusters offer "istio"; Istio's
// sidecars also offer "istio-peer-exchange" and, on HTTP, "istio-http/1.0",
// "istio-http/1.1" or "istio-h2". A PERMISSIVE port terminates mTLS only
// for these, so that TLS an application originates itself passes through
// to the workload untouched.
var meshALPN = []string{"istio-peer-exchange", "istio", "istio-http/1.0", "istio-http/1.1", "istio-h2"}

// meshSANMatcher accepts peer identities of the mesh's trust domain and
// of its aliases (policy.IdentityPrefixes).
func meshSANMatcher(s *mesh.Snapshot) []*tlsv3.SubjectAltNameMatcher {
	prefixes := policy.IdentityPrefixes(s)
	out := make([]*tlsv3.SubjectAltNameMatcher, 0, len(prefixes))
	for _, p := range prefixes {
		out = append(out, &tlsv3.SubjectAltNameMatcher{
			SanType: tlsv3.SubjectAltNameMatcher_URI,
			Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: p}},
		})
	}
	return out
}

// meshValidation validates peers against the mesh roots (SDS secret
// ROOTCA) and the trust domain.
func meshValidation(s *mesh.Snapshot, ads *corev3.ConfigSource) *tlsv3.CommonTlsContext_CombinedValidationContext {
	return &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
		DefaultValidationContext:         &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: meshSANMatcher(s)},
		ValidationContextSdsSecretConfig: &tlsv3.SdsSecretConfig{Name: build.RootCASecret, SdsConfig: ads},
	}}
}

// inboundMTLS is the transport socket of an inbound chain that terminates
// mesh mTLS: the workload certificate (SDS "default"), a client
// certificate required and validated against the mesh roots (SDS
// "ROOTCA") and trust domain. HTTP chains negotiate h2 or http/1.1, TCP
// chains Istio's values. Built once per snapshot and SDS cluster (read
// only, shared by the proxies).
func (b *listenerBuilder) inboundMTLS(http bool) *corev3.TransportSocket {
	cached := &b.mtlsTCP
	alpn := []string{"istio-peer-exchange", "istio"}
	if http {
		cached, alpn = &b.mtlsHTTP, []string{"h2", "http/1.1"}
	}
	if *cached == nil {
		// The same for every proxy of the snapshot with the key's SDS
		// cluster: marshalled once per snapshot.
		k := inboundMTLSKey{sdsCluster: b.v.Key().SDSCluster, http: http}
		*cached = b.v.Snapshot().Memo(k, func() any { return newInboundMTLS(b.v.Snapshot(), k.sdsCluster, alpn) }).(*corev3.TransportSocket)
	}
	return *cached
}

// inboundMTLSKey memoizes inboundMTLS's transport sockets per snapshot.
type inboundMTLSKey struct {
	sdsCluster string
	http       bool
}

// newInboundMTLS builds an inbound mTLS transport socket (inboundMTLS).
func newInboundMTLS(s *mesh.Snapshot, sdsCluster string, alpn []string) *corev3.TransportSocket {
	ads := build.SDSConfigSource(sdsCluster)
	ctx := &tlsv3.DownstreamTlsContext{
		CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsParams:                      &tlsv3.TlsParameters{TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_2},
			AlpnProtocols:                  alpn,
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: build.WorkloadCertSecret, SdsConfig: ads}},
			ValidationContextType:          meshValidation(s, ads),
		},
		RequireClientCertificate: wrapperspb.Bool(true),
	}
	return &corev3.TransportSocket{Name: build.TLSTransportSocket, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: build.Any(ctx)}}
}

// inboundChains builds the chains of one inbound port for its effective
// mTLS mode:
//   - STRICT: one chain that requires mTLS (a plain-text connection fails
//     the handshake). It deliberately matches no transport protocol: were
//     it to match only "tls", plain text would fall through to the
//     passthrough chain and skip the port's mode;
//   - DISABLE: one plain-text chain;
//   - PERMISSIVE: mTLS for TLS with a mesh ALPN, TLS of the application's
//     own passed through as TCP, and plain text — three chains told apart
//     by the tls_inspector listener filter (transport protocol and ALPN).
//
// app builds a chain's filters for the port's protocol; tcp builds TCP
// filters (for TLS passed through). The returned flag says whether the
// chains need the tls_inspector.
func (b *listenerBuilder) inboundChains(name string, match func() *listenerv3.FilterChainMatch, mode policy.MTLSMode, http bool,
	app, tcp func() []*listenerv3.Filter) ([]*listenerv3.FilterChain, bool) {
	switch mode {
	case policy.MTLSStrict:
		return []*listenerv3.FilterChain{{Name: name, FilterChainMatch: match(), TransportSocket: b.inboundMTLS(http), Filters: app()}}, false
	case policy.MTLSDisable:
		return []*listenerv3.FilterChain{{Name: name, FilterChainMatch: match(), Filters: app()}}, false
	}
	mtls, passTLS, plain := match(), match(), match()
	mtls.TransportProtocol, mtls.ApplicationProtocols = transportTLS, meshALPN
	passTLS.TransportProtocol = transportTLS
	plain.TransportProtocol = transportRaw
	// The mTLS and plain-text chains serve the port alike: one list of
	// filters (a connection manager marshalled once) serves both.
	appFilters := app()
	return []*listenerv3.FilterChain{
		{Name: name + "mtls", FilterChainMatch: mtls, TransportSocket: b.inboundMTLS(http), Filters: appFilters},
		{Name: name + "tls", FilterChainMatch: passTLS, Filters: tcp()},
		{Name: name, FilterChainMatch: plain, Filters: appFilters},
	}, true
}
