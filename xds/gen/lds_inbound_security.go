package gen

import (
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/policy"
	"github.com/navemesh/nave/xds/mesh"
)

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

// inboundFilters is what the workload's AuthorizationPolicies (and
// RequestAuthentications) put into its inbound chains: HTTP filters before
// the router, network filters before tcp_proxy. Built once per view; the
// messages are shared by every chain.
type inboundFilters struct {
	http []*hcmv3.HttpFilter
	tcp  []*listenerv3.Filter
}

// inboundSecurityFilters selects the workload's policies and translates
// them: JWT authentication first (HTTP), then RBAC audit, deny, allow.
func (b *listenerBuilder) inboundSecurityFilters() *inboundFilters {
	if b.security != nil {
		return b.security
	}
	f := &inboundFilters{}
	if jwt := b.jwtFilter(); jwt != nil {
		f.http = append(f.http, jwt)
	}
	policies := b.v.AuthorizationPolicies()
	td := policy.TrustDomain(b.v.Snapshot())
	f.http = append(f.http, policy.BuildRBAC(policies, policy.RBACTarget{TrustDomain: td}, b.problems.Add).HTTPFilters(true)...)
	f.tcp = policy.BuildRBAC(policies, policy.RBACTarget{TrustDomain: td, TCP: true}, b.problems.Add).NetworkFilters()
	b.security = f
	return f
}

// jwtFilter is the workload's JWT authentication filter; nil when no
// RequestAuthentication applies.
func (b *listenerBuilder) jwtFilter() *hcmv3.HttpFilter {
	policies := b.v.RequestAuthentications()
	if len(policies) == 0 {
		return nil
	}
	cfg := policy.BuildJWTAuthn(policies, b.jwksCluster, b.problems.Add)
	if cfg == nil {
		return nil
	}
	return &hcmv3.HttpFilter{Name: policy.JWTAuthnFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: build.Any(cfg)}}
}

// jwksCluster is the outbound cluster of a service port visible to the
// proxy, or "".
func (b *listenerBuilder) jwksCluster(host string, port uint32) string {
	svc := b.v.Service(host)
	if svc == nil {
		return ""
	}
	if _, ok := svc.Port(port); !ok {
		return ""
	}
	return build.ClusterName(host, port, "")
}

// mtlsMode is the effective mTLS mode of the workload's port (0: the
// workload as a whole).
func (b *listenerBuilder) mtlsMode(port uint32) policy.MTLSMode {
	return b.v.PeerAuthentications().Mode(port, b.problems.Add)
}

// meshSANMatcher accepts peer identities of the mesh's trust domain.
func meshSANMatcher(s *mesh.Snapshot) []*tlsv3.SubjectAltNameMatcher {
	return []*tlsv3.SubjectAltNameMatcher{{
		SanType: tlsv3.SubjectAltNameMatcher_URI,
		Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: policy.IdentityPrefix(s)}},
	}}
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
// chains Istio's values. Built once per listener builder.
func (b *listenerBuilder) inboundMTLS(http bool) *corev3.TransportSocket {
	cached := &b.mtlsTCP
	alpn := []string{"istio-peer-exchange", "istio"}
	if http {
		cached, alpn = &b.mtlsHTTP, []string{"h2", "http/1.1"}
	}
	if *cached == nil {
		ads := build.ADSConfigSource()
		ctx := &tlsv3.DownstreamTlsContext{
			CommonTlsContext: &tlsv3.CommonTlsContext{
				TlsParams:                      &tlsv3.TlsParameters{TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_2},
				AlpnProtocols:                  alpn,
				TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: build.WorkloadCertSecret, SdsConfig: ads}},
				ValidationContextType:          meshValidation(b.v.Snapshot(), ads),
			},
			RequireClientCertificate: wrapperspb.Bool(true),
		}
		*cached = &corev3.TransportSocket{Name: build.TLSTransportSocket, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: build.Any(ctx)}}
	}
	return *cached
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
	return []*listenerv3.FilterChain{
		{Name: name + "mtls", FilterChainMatch: mtls, TransportSocket: b.inboundMTLS(http), Filters: app()},
		{Name: name + "tls", FilterChainMatch: passTLS, Filters: tcp()},
		{Name: name, FilterChainMatch: plain, Filters: app()},
	}, true
}

// gatewayHTTPFilters are the HTTP filters of a gateway's connection
// managers: the gateway workload's JWT authentication and authorization
// (AuthorizationPolicies select gateways as they do sidecars), then
// fault, CORS and router.
func (b *listenerBuilder) gatewayHTTPFilters() []*hcmv3.HttpFilter {
	sec := b.inboundSecurityFilters()
	if len(sec.http) == 0 {
		return b.outboundHTTPFilters
	}
	return append(slices.Clone(sec.http), b.outboundHTTPFilters...)
}

// gatewayTCPFilters puts the gateway workload's network authorization
// filters before a gateway's tcp_proxy.
func (b *listenerBuilder) gatewayTCPFilters(proxy *listenerv3.Filter) []*listenerv3.Filter {
	return append(slices.Clone(b.inboundSecurityFilters().tcp), proxy)
}
