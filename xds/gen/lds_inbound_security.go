package gen

import (
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbacnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/mesh"
)

// Filter names of inbound security: the RBAC filters are named after
// these with their action appended (".audit", ".deny", ".allow").
const (
	RBACHTTPFilter    = "envoy.filters.http.rbac"
	RBACNetworkFilter = "envoy.filters.network.rbac"
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

// trustDomain is the snapshot's trust domain (DefaultTrustDomain when
// the snapshot was not made by mesh.Build).
func trustDomain(s *mesh.Snapshot) string {
	if s.TrustDomain == "" {
		return mesh.DefaultTrustDomain
	}
	return s.TrustDomain
}

// inboundSecurityFilters selects the workload's policies and translates
// them: JWT authentication first (HTTP), then RBAC audit, deny, allow.
func (v *View) inboundSecurityFilters() *inboundFilters {
	if v.filters != nil {
		return v.filters
	}
	f := &inboundFilters{}
	if jwt := v.jwtFilter(); jwt != nil {
		f.http = append(f.http, jwt)
	}
	policies := SelectAuthorizationPolicies(v.snap, v.key.Namespace, v.labels, v.report)
	td := trustDomain(v.snap)
	f.http = append(f.http, BuildRBAC(policies, RBACTarget{TrustDomain: td}, v.report).httpFilters(true)...)
	t := BuildRBAC(policies, RBACTarget{TrustDomain: td, TCP: true}, v.report)
	for _, r := range []*rbacv3.RBAC{t.Audit, t.Deny, t.Allow} {
		if r != nil {
			f.tcp = append(f.tcp, &listenerv3.Filter{Name: RBACNetworkFilter + "." + actionName(r), ConfigType: &listenerv3.Filter_TypedConfig{
				TypedConfig: build.Any(&rbacnetv3.RBAC{Rules: r, StatPrefix: "inbound_rbac_" + actionName(r) + "."})}})
		}
	}
	v.filters = f
	return f
}

// httpFilters renders the RBAC configs as HTTP filters in order (audit,
// deny, allow; audit only withAudit), each named after the filter and its
// action so that names are unique, as grpc-go requires.
func (r RBAC) httpFilters(withAudit bool) []*hcmv3.HttpFilter {
	var out []*hcmv3.HttpFilter
	for _, rules := range []*rbacv3.RBAC{r.Audit, r.Deny, r.Allow} {
		if rules == nil || (rules == r.Audit && !withAudit) {
			continue
		}
		out = append(out, &hcmv3.HttpFilter{Name: RBACHTTPFilter + "." + actionName(rules), ConfigType: &hcmv3.HttpFilter_TypedConfig{
			TypedConfig: build.Any(&rbachttpv3.RBAC{Rules: rules})}})
	}
	return out
}

// actionName is "audit", "deny" or "allow".
func actionName(r *rbacv3.RBAC) string {
	switch r.GetAction() {
	case rbacv3.RBAC_LOG:
		return "audit"
	case rbacv3.RBAC_DENY:
		return "deny"
	}
	return "allow"
}

// meshSANMatcher accepts peer identities of the mesh's trust domain.
func meshSANMatcher(td string) []*tlsv3.SubjectAltNameMatcher {
	return []*tlsv3.SubjectAltNameMatcher{{
		SanType: tlsv3.SubjectAltNameMatcher_URI,
		Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: spiffePrefix + td + "/"}},
	}}
}

// meshValidation validates peers against the mesh roots (SDS secret
// ROOTCA) and the trust domain.
func meshValidation(td string, ads *corev3.ConfigSource) *tlsv3.CommonTlsContext_CombinedValidationContext {
	return &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
		DefaultValidationContext:         &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: meshSANMatcher(td)},
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
				ValidationContextType:          meshValidation(trustDomain(b.v.snap), ads),
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
func (b *listenerBuilder) inboundChains(name string, match func() *listenerv3.FilterChainMatch, mode MTLSMode, http bool,
	app, tcp func() []*listenerv3.Filter) ([]*listenerv3.FilterChain, bool) {
	switch mode {
	case MTLSStrict:
		return []*listenerv3.FilterChain{{Name: name, FilterChainMatch: match(), TransportSocket: b.inboundMTLS(http), Filters: app()}}, false
	case MTLSDisable:
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
	sec := b.v.inboundSecurityFilters()
	if len(sec.http) == 0 {
		return b.outboundHTTPFilters
	}
	return append(slices.Clone(sec.http), b.outboundHTTPFilters...)
}

// gatewayTCPFilters puts the gateway workload's network authorization
// filters before a gateway's tcp_proxy.
func (b *listenerBuilder) gatewayTCPFilters(proxy *listenerv3.Filter) []*listenerv3.Filter {
	return append(slices.Clone(b.v.inboundSecurityFilters().tcp), proxy)
}
