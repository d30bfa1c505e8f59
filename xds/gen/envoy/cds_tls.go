package envoy

import (
	"net/netip"
	"strconv"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/policy"
	"github.com/navemesh/nave/xds/proxy"
)

// IstioMutualSNI is the SNI a client sends for ISTIO_MUTUAL traffic to a
// cluster when the DestinationRule names none:
// "outbound_.PORT_.SUBSET_.HOST", which lets a gateway in the path route
// the still-encrypted connection by SNI.
func IstioMutualSNI(host string, port uint32, subset string) string {
	return "outbound_." + strconv.FormatUint(uint64(port), 10) + "_." + subset + "_." + host
}

// tls applies the TLS origination of the cluster's policy: SIMPLE and
// MUTUAL as configured, ISTIO_MUTUAL as mesh mTLS; DISABLE originates
// nothing. Without any tls setting, auto-mTLS applies (autoMTLS).
func (b *cdsBuilder) tls(c *clusterv3.Cluster, oc *outboundCluster) {
	settings := oc.Policy.GetTls()
	var ctx *tlsv3.UpstreamTlsContext
	switch {
	case settings == nil:
		b.autoMTLS(c, oc)
		return
	case settings.GetMode() == networking.ClientTLSSettings_SIMPLE, settings.GetMode() == networking.ClientTLSSettings_MUTUAL:
		ctx = b.originate(oc, settings)
	case settings.GetMode() == networking.ClientTLSSettings_ISTIO_MUTUAL:
		ctx = b.istioMutual(oc, settings)
	default:
		return
	}
	c.TransportSocket = &corev3.TransportSocket{
		Name:       build.TLSTransportSocket,
		ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: build.Any(ctx)},
	}
}

// Endpoint metadata auto-mTLS reads: Istio's sidecar injection labels a
// workload security.istio.io/tlsMode=istio; EDS copies the label into the
// endpoint's metadata under envoy.transport_socket_match, where a
// cluster's transport socket matches look.
const (
	tlsModeLabel            = "security.istio.io/tlsMode"
	tlsModeIstio            = "istio"
	transportSocketMatchKey = "envoy.transport_socket_match"
)

// autoMTLS is Istio's auto mutual TLS for a cluster without a tls
// setting: endpoints that run a sidecar (metadata tlsMode: istio) are
// reached with ISTIO_MUTUAL, the others in plain text, chosen per
// endpoint by the cluster's transport socket match. Istio adds a second,
// match-all "tlsMode-disabled" match with a raw_buffer socket; it is left
// out, as Envoy gives an endpoint no match selects the cluster's own
// transport socket, raw_buffer when the cluster has none (decision 055).
// It does not apply to
// MESH_EXTERNAL services, to original-destination clusters (no endpoint
// metadata to match), nor when the mesh- or namespace-wide
// PeerAuthentication of the service's namespace is DISABLE (Istio's best
// effort: workload-level DISABLE is applied per endpoint, by leaving the
// endpoint's tlsMode out; see edsBuilder.tlsModeMetadata), nor when the
// MeshConfig sets enableAutoMtls false.
func (b *cdsBuilder) autoMTLS(c *clusterv3.Cluster, oc *outboundCluster) {
	if oc.Service.External || oc.kind == kindOriginalDst || !b.v.Snapshot().AutoMTLS() {
		return
	}
	mode, ok := b.autoModes[oc.Service.Namespace]
	if !ok {
		mode, _ = policy.EffectiveMTLS(b.v.Snapshot(), oc.Service.Namespace, nil, 0)
		if b.autoModes == nil {
			b.autoModes = map[string]policy.MTLSMode{}
		}
		b.autoModes[oc.Service.Namespace] = mode
	}
	if mode == policy.MTLSDisable {
		return
	}
	if b.istioMatch == nil {
		b.istioMatch = &structpb.Struct{Fields: map[string]*structpb.Value{"tlsMode": structpb.NewStringValue(tlsModeIstio)}}
	}
	c.TransportSocketMatches = []*clusterv3.Cluster_TransportSocketMatch{
		{Name: "tlsMode-istio", Match: b.istioMatch, TransportSocket: &corev3.TransportSocket{
			Name: build.TLSTransportSocket, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: b.autoMTLSContext(oc)}}},
	}
}

// autoMTLSContext is istioMutual(oc, nil) as an Any. Only the SNI differs
// between clusters, so the rest is marshalled once per generation and the
// SNI (field 2, after common_tls_context, field 1) appended: the bytes are
// what marshalling the whole message gives, which writes fields in number
// order (TestAutoMTLSContextBytes).
func (b *cdsBuilder) autoMTLSContext(oc *outboundCluster) *anypb.Any {
	if len(oc.Service.SubjectAltNames) > 0 {
		// The service's own SANs: a context of its own.
		return build.Any(b.istioMutual(oc, nil))
	}
	if b.autoContext == nil {
		ctx := b.istioMutual(oc, nil)
		ctx.Sni = ""
		b.autoContext = build.Any(ctx).GetValue()
	}
	sni := IstioMutualSNI(oc.Service.Hostname, oc.Port.Number, oc.Subset)
	v := make([]byte, len(b.autoContext), len(b.autoContext)+len(sni)+8)
	copy(v, b.autoContext)
	v = protowire.AppendTag(v, upstreamTLSSNIField, protowire.BytesType)
	v = protowire.AppendString(v, sni)
	return &anypb.Any{TypeUrl: upstreamTLSTypeURL, Value: v}
}

// The UpstreamTlsContext facts autoMTLSContext relies on.
var (
	upstreamTLSTypeURL  = typeurl.Of(&tlsv3.UpstreamTlsContext{})
	upstreamTLSSNIField = protowire.Number((&tlsv3.UpstreamTlsContext{}).ProtoReflect().Descriptor().Fields().ByName("sni").Number())
)

// istioMutual is mesh mTLS: the workload certificate and the mesh roots
// come by SDS over ADS (secrets "default" and "ROOTCA", served by the
// CA), the SNI is Istio's for the cluster unless the DestinationRule names
// one, and the peer must present an identity of the mesh's trust domain,
// or one of the DestinationRule's subjectAltNames when it lists some, else
// one of the ServiceEntry's (as Istio, which takes them as the service's
// accounts). (Istio narrows the check to the service accounts of the endpoints; that
// would make the cluster depend on endpoints, which an endpoint-only
// change must not regenerate.) settings is nil for auto-mTLS.
func (b *cdsBuilder) istioMutual(oc *outboundCluster, settings *networking.ClientTLSSettings) *tlsv3.UpstreamTlsContext {
	sni := settings.GetSni()
	if sni == "" {
		sni = IstioMutualSNI(oc.Service.Hostname, oc.Port.Number, oc.Subset)
	}
	sans := sanMatchers(settings.GetSubjectAltNames())
	if len(sans) == 0 {
		sans = sanMatchers(oc.Service.SubjectAltNames)
	}
	if len(sans) == 0 {
		sans = meshSANMatcher(b.v.Snapshot())
	}
	return &tlsv3.UpstreamTlsContext{
		Sni: sni,
		CommonTlsContext: &tlsv3.CommonTlsContext{
			AlpnProtocols:                  []string{"istio"},
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: build.WorkloadCertSecret, SdsConfig: b.sds}},
			ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext:         &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: sans},
				ValidationContextSdsSecretConfig: &tlsv3.SdsSecretConfig{Name: build.RootCASecret, SdsConfig: b.sds},
			}},
		},
	}
}

// originate builds SIMPLE/MUTUAL TLS origination. credentialName takes
// the certificates from an SDS secret of that name (the CA from
// "NAME-cacert") — Istio honours it only on gateways, and on sidecars only
// when the DestinationRule has a workloadSelector; elsewhere the file
// paths apply. The server's certificate must carry one of the rule's
// subjectAltNames, else (as Istio) one of the ServiceEntry's.
func (b *cdsBuilder) originate(oc *outboundCluster, s *networking.ClientTLSSettings) *tlsv3.UpstreamTlsContext {
	mutual := s.GetMode() == networking.ClientTLSSettings_MUTUAL
	ctx := &tlsv3.UpstreamTlsContext{Sni: s.GetSni(), CommonTlsContext: &tlsv3.CommonTlsContext{}}
	skipVerify := s.GetInsecureSkipVerify().GetValue()
	sans := sanMatchers(s.GetSubjectAltNames())
	sansOf := "subjectAltNames"
	if len(sans) == 0 {
		sans = sanMatchers(oc.Service.SubjectAltNames)
		sansOf = "the ServiceEntry's subjectAltNames"
	}
	useCredential := s.GetCredentialName() != "" &&
		(b.v.Key().Type == proxy.Router || oc.Rule.DestinationRule().GetWorkloadSelector() != nil)
	if useCredential {
		name := s.GetCredentialName()
		if mutual {
			// From the proxy's agent when it has one, as a Gateway
			// server's credentialName (decision 038).
			ctx.CommonTlsContext.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{{Name: name, SdsConfig: b.sds}}
		}
		if !skipVerify {
			ctx.CommonTlsContext.ValidationContextType = &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext:         &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: sans},
				ValidationContextSdsSecretConfig: &tlsv3.SdsSecretConfig{Name: name + build.CACertSuffix, SdsConfig: b.sds},
			}}
		}
		return ctx
	}
	if mutual {
		if s.GetClientCertificate() == "" || s.GetPrivateKey() == "" {
			b.problems.Addf(oc.Rule.Ref(), oc.Field("tls"), "MUTUAL needs clientCertificate and privateKey (or a credentialName where Istio honours one); originating TLS without a client certificate")
		} else {
			ctx.CommonTlsContext.TlsCertificates = []*tlsv3.TlsCertificate{{
				CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: s.GetClientCertificate()}},
				PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: s.GetPrivateKey()}},
			}}
		}
	}
	if skipVerify {
		return ctx
	}
	if s.GetCaCertificates() == "" {
		// Envoy refuses to match SANs without a trusted CA (it would be no
		// check at all).
		if len(sans) > 0 {
			b.problems.Addf(oc.Rule.Ref(), oc.Field("tls")+".subjectAltNames", "%s need caCertificates to be checked against; ignored", sansOf)
		}
		return ctx
	}
	vc := &tlsv3.CertificateValidationContext{
		TrustedCa:                 &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: s.GetCaCertificates()}},
		MatchTypedSubjectAltNames: sans,
	}
	if crl := s.GetCaCrl(); crl != "" {
		vc.Crl = &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: crl}}
	}
	ctx.CommonTlsContext.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: vc}
	return ctx
}

// sanMatchers turns subjectAltNames into exact matchers of the SAN type
// each one looks like: a URI (spiffe://...), an IP address, or a DNS name.
func sanMatchers(names []string) []*tlsv3.SubjectAltNameMatcher {
	if len(names) == 0 {
		return nil
	}
	out := make([]*tlsv3.SubjectAltNameMatcher, 0, len(names))
	for _, n := range names {
		t := tlsv3.SubjectAltNameMatcher_DNS
		if strings.Contains(n, "://") {
			t = tlsv3.SubjectAltNameMatcher_URI
		} else if _, err := netip.ParseAddr(n); err == nil {
			t = tlsv3.SubjectAltNameMatcher_IP_ADDRESS
		}
		out = append(out, &tlsv3.SubjectAltNameMatcher{
			SanType: t,
			Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: n}},
		})
	}
	return out
}
