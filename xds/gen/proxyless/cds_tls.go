package proxyless

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/policy"
	"github.com/navemesh/nave/xds/mesh"
)

// tlsSupported reports whether proxyless cluster oc can be generated
// with the TLS its merged traffic policy asks for:
//
//   - no tls, or DISABLE: plain text. Auto-mTLS does not apply to
//     proxyless clients: Envoy's is per endpoint, by transport socket
//     matches, which grpc-go refuses (it NACKs a cluster with any), and
//     choosing per cluster would make clusters depend on endpoints.
//   - ISTIO_MUTUAL: mesh mTLS with grpc-go's certificate provider
//     (transportSocket).
//   - SIMPLE, MUTUAL: grpc-go takes certificates only from the certificate
//     providers of its bootstrap, not from the rule's files or
//     credentialName, so the hub cannot express them. The cluster (and its
//     endpoints) is left out, so that calls fail rather than go out in
//     plain text, and the policy is reported.
//
// The answer reads only the DestinationRule, never endpoints, so an
// endpoint-only change leaves it as it was (Endpoints enumerates
// clusters through here too, and leaves out the same ones).
func (g *generator) tlsSupported(oc *policy.Cluster) bool {
	settings := oc.Policy.GetTls()
	switch settings.GetMode() {
	case networking.ClientTLSSettings_SIMPLE, networking.ClientTLSSettings_MUTUAL:
		g.problems.Add(mesh.Problem{Resource: oc.Rule.Ref(), Field: oc.Field("tls") + ".mode",
			Reason: settings.GetMode().String() + " TLS origination is not supported for proxyless gRPC clients (grpc-go takes certificates only from its bootstrap's certificate providers); their clusters for this policy are left out, so calls fail instead of going out in plain text"})
		return false
	}
	return true
}

// transportSocket is the transport socket of a proxyless cluster with
// TLS settings settings to a service whose ServiceEntry lists
// serviceSANs: ISTIO_MUTUAL's (upstreamTLS), nil for plain text. Clusters
// without their own sni or subjectAltNames share one message (read-only
// once built).
func (g *generator) transportSocket(settings *networking.ClientTLSSettings, serviceSANs []string) *corev3.TransportSocket {
	if settings.GetMode() != networking.ClientTLSSettings_ISTIO_MUTUAL {
		return nil
	}
	shared := settings.GetSni() == "" && len(settings.GetSubjectAltNames()) == 0 && len(serviceSANs) == 0
	if shared && g.meshTLS != nil {
		return g.meshTLS
	}
	ts := &corev3.TransportSocket{Name: build.TLSTransportSocket, ConfigType: &corev3.TransportSocket_TypedConfig{
		TypedConfig: build.Any(upstreamTLS(g.snap, settings, serviceSANs))}}
	if shared {
		g.meshTLS = ts
	}
	return ts
}

// upstreamTLS is ISTIO_MUTUAL for proxyless gRPC clients (gRFC A29):
// the workload certificate and the mesh roots from certificate provider
// instance CertificateProvider (certificate names as the SDS secrets
// of sidecars), and a server identity of the mesh's trust domain or an
// alias of it, or one
// of the rule's subjectAltNames when it lists some, else one of the
// ServiceEntry's (serviceSANs; as Istio for Envoy). grpc-go reads SAN
// matchers only from the deprecated match_subject_alt_names (not
// match_typed_subject_alt_names) and checks them against every SAN of the
// peer's certificate. The rule's sni is passed on (grpc-go sends it only
// with GRPC_EXPERIMENTAL_XDS_SNI); there is no default SNI, as in Istio's
// proxyless generator, and no ALPN (grpc-go ignores alpn_protocols and
// always offers h2).
func upstreamTLS(s *mesh.Snapshot, settings *networking.ClientTLSSettings, serviceSANs []string) *tlsv3.UpstreamTlsContext {
	names := settings.GetSubjectAltNames()
	if len(names) == 0 {
		names = serviceSANs
	}
	var sans []*matcherv3.StringMatcher
	for _, n := range names {
		sans = append(sans, &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: n}})
	}
	if len(sans) == 0 {
		for _, p := range policy.IdentityPrefixes(s) {
			sans = append(sans, &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: p}})
		}
	}
	return &tlsv3.UpstreamTlsContext{Sni: settings.GetSni(), CommonTlsContext: commonTLS(sans)}
}

// commonTLS is the CommonTlsContext of proxyless gRPC mTLS, client and
// server: identity and roots from the certificate provider, and the peer's
// SANs checked against sans (none on servers: grpc-go NACKs them there).
func commonTLS(sans []*matcherv3.StringMatcher) *tlsv3.CommonTlsContext {
	return &tlsv3.CommonTlsContext{
		TlsCertificateProviderInstance: &tlsv3.CertificateProviderPluginInstance{InstanceName: CertificateProvider, CertificateName: build.WorkloadCertSecret},
		ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			CaCertificateProviderInstance: &tlsv3.CertificateProviderPluginInstance{InstanceName: CertificateProvider, CertificateName: build.RootCASecret},
			//lint:ignore SA1019 grpc-go (v1.85, xdsresource.securityConfigFromCommonTLSContextUsingNewFields) reads SAN matchers only from match_subject_alt_names, not from match_typed_subject_alt_names
			MatchSubjectAltNames: sans,
		}},
	}
}
