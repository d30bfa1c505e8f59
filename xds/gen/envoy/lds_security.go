package envoy

import (
	"slices"
	"strings"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/policy"
)

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
	target := policy.Target(b.v.Snapshot())
	target.ExtAuthz = true
	// CUSTOM first, then audit, deny, allow: Istio's order.
	httpRBAC := policy.BuildRBAC(policies, target, b.problems.Add)
	ext := b.extAuthz(&httpRBAC)
	f.http = append(f.http, httpRBAC.CustomHTTPFilters(ext)...)
	f.http = append(f.http, httpRBAC.HTTPFilters(true)...)
	target.TCP = true
	tcpRBAC := policy.BuildRBAC(policies, target, b.problems.Add)
	if tcpRBAC.Custom != nil && ext == nil {
		tcpRBAC.FailCustomClosed()
	}
	if tcpRBAC.Custom != nil && ext.Network == nil {
		b.problems.Addf(tcpRBAC.ProviderRef, "spec.provider.name", "provider %s (envoyExtAuthzHttp) cannot check TCP connections: as in Istio, this workload's TCP traffic is not sent to it", tcpRBAC.Providers[0])
	}
	f.tcp = append(tcpRBAC.CustomNetworkFilters(ext), tcpRBAC.NetworkFilters()...)
	b.security = f
	return f
}

// extAuthz is the external authorizer of the workload's CUSTOM policies
// (nil without any). CUSTOM policies that cannot be applied — several
// providers on one workload (Istio allows one), a provider MeshConfig
// does not define or that is no ext_authz one, a service the proxy does
// not see — are reported and fail closed (r.FailCustomClosed).
func (b *listenerBuilder) extAuthz(r *policy.RBAC) *policy.ExtAuthz {
	if r.Custom == nil {
		return nil
	}
	fail := func(format string, args ...any) *policy.ExtAuthz {
		b.problems.Addf(r.ProviderRef, "spec.provider.name", format+"; requests the CUSTOM rules match are denied (fail closed)", args...)
		r.FailCustomClosed()
		return nil
	}
	if len(r.Providers) != 1 {
		return fail("CUSTOM policies of one workload name %d providers (%s); Istio allows one", len(r.Providers), strings.Join(r.Providers, ", "))
	}
	name := r.Providers[0]
	p := b.v.Snapshot().ExtensionProvider(name)
	if p == nil {
		return fail("MeshConfig extensionProviders has no provider %q", name)
	}
	ext, err := policy.BuildExtAuthz(name, p, b.jwksCluster)
	if err != nil {
		return fail("%v", err)
	}
	return ext
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
// proxy, or "" (JWKS fetches and external authorizers use it).
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
