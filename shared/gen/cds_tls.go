package gen

import (
	"net/netip"
	"strconv"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/shared/proxy"
)

// Names of the SDS secrets a proxy's own workload identity comes in
// (Istio's names, served over ADS by the security part).
const (
	WorkloadCertSecret = "default"
	RootCASecret       = "ROOTCA"
	// tlsTransportSocket is the name of Envoy's TLS transport socket.
	tlsTransportSocket = "envoy.transport_sockets.tls"
)

// IstioMutualSNI is the SNI a client sends for ISTIO_MUTUAL traffic to a
// cluster when the DestinationRule names none:
// "outbound_.PORT_.SUBSET_.HOST", which lets a gateway in the path route
// the still-encrypted connection by SNI.
func IstioMutualSNI(host string, port uint32, subset string) string {
	return "outbound_." + strconv.FormatUint(uint64(port), 10) + "_." + subset + "_." + host
}

// tls applies the TLS origination of the cluster's policy. DISABLE (or no
// tls) originates nothing.
func (b *cdsBuilder) tls(c *clusterv3.Cluster, oc *outboundCluster) {
	settings := oc.policy.GetTls()
	var ctx *tlsv3.UpstreamTlsContext
	switch settings.GetMode() {
	case networking.ClientTLSSettings_SIMPLE, networking.ClientTLSSettings_MUTUAL:
		ctx = b.originate(oc, settings)
	case networking.ClientTLSSettings_ISTIO_MUTUAL:
		ctx = b.istioMutual(oc, settings)
	default:
		return
	}
	c.TransportSocket = &corev3.TransportSocket{
		Name:       tlsTransportSocket,
		ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(ctx)},
	}
}

// istioMutual is the hook for mesh mTLS: the workload certificate and the
// mesh roots come by SDS over ADS (secrets "default" and "ROOTCA"); the
// security part serves them and may add the expected peer identities
// (SPIFFE URIs of the endpoints' service accounts) here.
func (b *cdsBuilder) istioMutual(oc *outboundCluster, settings *networking.ClientTLSSettings) *tlsv3.UpstreamTlsContext {
	sni := settings.GetSni()
	if sni == "" {
		sni = IstioMutualSNI(oc.svc.Hostname, oc.port.Number, oc.subset)
	}
	return &tlsv3.UpstreamTlsContext{
		Sni: sni,
		CommonTlsContext: &tlsv3.CommonTlsContext{
			AlpnProtocols:                  []string{"istio"},
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: WorkloadCertSecret, SdsConfig: b.ads}},
			ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext:         &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: sanMatchers(settings.GetSubjectAltNames())},
				ValidationContextSdsSecretConfig: &tlsv3.SdsSecretConfig{Name: RootCASecret, SdsConfig: b.ads},
			}},
		},
	}
}

// originate builds SIMPLE/MUTUAL TLS origination. credentialName takes
// the certificates from an SDS secret of that name (the CA from
// "NAME-cacert") — Istio honours it only on gateways, and on sidecars only
// when the DestinationRule has a workloadSelector; elsewhere the file
// paths apply.
func (b *cdsBuilder) originate(oc *outboundCluster, s *networking.ClientTLSSettings) *tlsv3.UpstreamTlsContext {
	mutual := s.GetMode() == networking.ClientTLSSettings_MUTUAL
	ctx := &tlsv3.UpstreamTlsContext{Sni: s.GetSni(), CommonTlsContext: &tlsv3.CommonTlsContext{}}
	skipVerify := s.GetInsecureSkipVerify().GetValue()
	sans := sanMatchers(s.GetSubjectAltNames())
	useCredential := s.GetCredentialName() != "" &&
		(b.v.Key().Type == proxy.Router || oc.dr.DestinationRule().GetWorkloadSelector() != nil)
	if useCredential {
		name := s.GetCredentialName()
		if mutual {
			ctx.CommonTlsContext.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{{Name: name, SdsConfig: b.ads}}
		}
		if !skipVerify {
			ctx.CommonTlsContext.ValidationContextType = &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext:         &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: sans},
				ValidationContextSdsSecretConfig: &tlsv3.SdsSecretConfig{Name: name + "-cacert", SdsConfig: b.ads},
			}}
		}
		return ctx
	}
	if mutual {
		if s.GetClientCertificate() == "" || s.GetPrivateKey() == "" {
			b.v.Problem(oc.dr.Ref(), policyPath(oc, "tls"), "MUTUAL needs clientCertificate and privateKey (or a credentialName where Istio honours one); originating TLS without a client certificate")
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
			b.v.Problem(oc.dr.Ref(), policyPath(oc, "tls")+".subjectAltNames", "subjectAltNames need caCertificates to be checked against; ignored")
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
