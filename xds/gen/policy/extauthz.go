package policy

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	extauthznetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/ext_authz/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbacnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/navemesh/nave/xds/gen/build"
)

// AuthorizationPolicy CUSTOM, as Istio builds it
// (pilot/pkg/security/authz/builder): the CUSTOM policies' rules become
// the shadow rules of an RBAC filter, named "istio-ext-authz-…" and
// translated as DENY rules (a field that cannot be expressed is left out,
// so the external authorizer is asked more often, never less). A shadow
// rule decides nothing; the RBAC filter records the one that matched in
// its dynamic metadata, and the ext_authz filter that follows is enabled
// only when that names a CUSTOM rule (filter_enabled_metadata). So the
// external authorizer (MeshConfig extensionProviders envoyExtAuthzHttp or
// envoyExtAuthzGrpc) is asked about the requests the rules match, before
// the DENY and ALLOW filters, as Istio orders them.

// Names of the CUSTOM filters and of the metadata that links them.
const (
	ExtAuthzHTTPFilter    = "envoy.filters.http.ext_authz"
	ExtAuthzNetworkFilter = "envoy.filters.network.ext_authz"
	// ExtAuthzPolicyPrefix starts the name of every CUSTOM rule.
	ExtAuthzPolicyPrefix = "istio-ext-authz"
	// extAuthzShadowPrefix is the shadow rules' stat prefix; Envoy puts
	// it before the metadata key "shadow_effective_policy_id".
	extAuthzShadowPrefix = "istio_ext_authz_"
	// defaultExtAuthzTimeout is Istio's timeout of a check (10 minutes).
	defaultExtAuthzTimeout = 600
)

// ExtAuthzCluster resolves a provider's service and port to the
// outbound cluster the proxy reaches it through ("" when the proxy does
// not see that service port).
type ExtAuthzCluster func(host string, port uint32) string

// ExtAuthz is one workload's external authorizer: the provider the
// CUSTOM policies selecting it name, translated. Read-only once built.
type ExtAuthz struct {
	// HTTP is the ext_authz HTTP filter's config.
	HTTP *extauthzv3.ExtAuthz
	// Network is the ext_authz network filter's config for TCP traffic;
	// nil for an envoyExtAuthzHttp provider, which cannot check a TCP
	// connection (Istio leaves such traffic to the other policies).
	Network *extauthznetv3.ExtAuthz
}

// BuildExtAuthz translates provider p (named name) into ext_authz
// configs, its service reached through cluster. It fails for a provider
// that is not an ext_authz one and for a service the proxy cannot reach.
func BuildExtAuthz(name string, p *meshv1alpha1.MeshConfig_ExtensionProvider, cluster ExtAuthzCluster) (*ExtAuthz, error) {
	enabled := &matcherv3.MetadataMatcher{
		Filter: RBACHTTPFilter,
		Path:   []*matcherv3.MetadataMatcher_PathSegment{{Segment: &matcherv3.MetadataMatcher_PathSegment_Key{Key: extAuthzShadowPrefix + "shadow_effective_policy_id"}}},
		Value: &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: ExtAuthzPolicyPrefix}}}},
	}
	resolve := func(service string, port uint32) (host, c string, err error) {
		host = service
		if _, h, ok := strings.Cut(service, "/"); ok {
			host = h // "namespace/host"
		}
		if c = cluster(host, port); c == "" {
			return "", "", fmt.Errorf("extension provider %q: the proxy sees no service %s with port %d", name, host, port)
		}
		return host, c, nil
	}
	timeout := func(d *durationpb.Duration) *durationpb.Duration {
		if d == nil {
			return durationpb.New(defaultExtAuthzTimeout * 1e9)
		}
		return d
	}
	status := func(s string) (*typev3.HttpStatus, error) {
		if s == "" {
			return nil, nil // Envoy's default, 403
		}
		code, err := strconv.Atoi(s)
		if err != nil || http.StatusText(code) == "" {
			return nil, fmt.Errorf("extension provider %q: statusOnError %q is not an HTTP status code", name, s)
		}
		return &typev3.HttpStatus{Code: typev3.StatusCode(code)}, nil
	}
	body := func(b *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationRequestBody) *extauthzv3.BufferSettings {
		if b == nil {
			return nil
		}
		return &extauthzv3.BufferSettings{MaxRequestBytes: b.GetMaxRequestBytes(), AllowPartialMessage: b.GetAllowPartialMessage(), PackAsBytes: b.GetPackAsBytes()}
	}
	switch {
	case p.GetEnvoyExtAuthzHttp() != nil:
		h := p.GetEnvoyExtAuthzHttp()
		host, c, err := resolve(h.GetService(), h.GetPort())
		if err != nil {
			return nil, err
		}
		st, err := status(h.GetStatusOnError())
		if err != nil {
			return nil, err
		}
		svc := &extauthzv3.HttpService{
			ServerUri: &corev3.HttpUri{
				Uri:              "http://" + host + ":" + strconv.FormatUint(uint64(h.GetPort()), 10),
				HttpUpstreamType: &corev3.HttpUri_Cluster{Cluster: c},
				Timeout:          timeout(h.GetTimeout()),
			},
			PathPrefix: h.GetPathPrefix(),
		}
		if len(h.GetIncludeAdditionalHeadersInCheck()) > 0 {
			req := &extauthzv3.AuthorizationRequest{}
			keys := make([]string, 0, len(h.GetIncludeAdditionalHeadersInCheck()))
			for k := range h.GetIncludeAdditionalHeadersInCheck() {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				req.HeadersToAdd = append(req.HeadersToAdd, &corev3.HeaderValue{Key: k, Value: h.GetIncludeAdditionalHeadersInCheck()[k]})
			}
			svc.AuthorizationRequest = req
		}
		if len(h.GetHeadersToUpstreamOnAllow())+len(h.GetHeadersToDownstreamOnDeny())+len(h.GetHeadersToDownstreamOnAllow()) > 0 {
			svc.AuthorizationResponse = &extauthzv3.AuthorizationResponse{
				AllowedUpstreamHeaders:        headerMatchers(h.GetHeadersToUpstreamOnAllow()),
				AllowedClientHeaders:          headerMatchers(h.GetHeadersToDownstreamOnDeny()),
				AllowedClientHeadersOnSuccess: headerMatchers(h.GetHeadersToDownstreamOnAllow()),
			}
		}
		cfg := &extauthzv3.ExtAuthz{
			Services:              &extauthzv3.ExtAuthz_HttpService{HttpService: svc},
			TransportApiVersion:   corev3.ApiVersion_V3,
			FailureModeAllow:      h.GetFailOpen(),
			ClearRouteCache:       h.GetClearRouteCache(),
			StatusOnError:         st,
			WithRequestBody:       body(h.GetIncludeRequestBodyInCheck()),
			FilterEnabledMetadata: enabled,
		}
		//lint:ignore SA1019 Istio still honours the deprecated includeHeadersInCheck
		headers := append(slices.Clone(h.GetIncludeRequestHeadersInCheck()), h.GetIncludeHeadersInCheck()...)
		cfg.AllowedHeaders = headerMatchers(headers)
		return &ExtAuthz{HTTP: cfg}, nil
	case p.GetEnvoyExtAuthzGrpc() != nil:
		g := p.GetEnvoyExtAuthzGrpc()
		host, c, err := resolve(g.GetService(), g.GetPort())
		if err != nil {
			return nil, err
		}
		st, err := status(g.GetStatusOnError())
		if err != nil {
			return nil, err
		}
		svc := &corev3.GrpcService{
			TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: c, Authority: host}},
			Timeout:         timeout(g.GetTimeout()),
		}
		return &ExtAuthz{
			HTTP: &extauthzv3.ExtAuthz{
				Services:              &extauthzv3.ExtAuthz_GrpcService{GrpcService: svc},
				TransportApiVersion:   corev3.ApiVersion_V3,
				FailureModeAllow:      g.GetFailOpen(),
				ClearRouteCache:       g.GetClearRouteCache(),
				StatusOnError:         st,
				WithRequestBody:       body(g.GetIncludeRequestBodyInCheck()),
				FilterEnabledMetadata: enabled,
			},
			Network: &extauthznetv3.ExtAuthz{
				StatPrefix:          "tcp.",
				GrpcService:         svc,
				TransportApiVersion: corev3.ApiVersion_V3,
				FailureModeAllow:    g.GetFailOpen(),
				FilterEnabledMetadata: &matcherv3.MetadataMatcher{
					Filter: RBACNetworkFilter,
					Path:   enabled.GetPath(),
					Value:  enabled.GetValue(),
				},
			},
		}, nil
	}
	return nil, fmt.Errorf("extension provider %q is not an ext_authz provider (envoyExtAuthzHttp or envoyExtAuthzGrpc)", name)
}

// headerMatchers matches header names as Istio does: exact, "prefix*",
// "*suffix", or "*" (any), ignoring case; nil for none.
func headerMatchers(names []string) *matcherv3.ListStringMatcher {
	if len(names) == 0 {
		return nil
	}
	out := &matcherv3.ListStringMatcher{}
	for _, n := range names {
		m := &matcherv3.StringMatcher{IgnoreCase: true}
		switch {
		case n == "*":
			m.MatchPattern = &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: ".+"}}
			m.IgnoreCase = false
		case strings.HasSuffix(n, "*"):
			m.MatchPattern = &matcherv3.StringMatcher_Prefix{Prefix: strings.TrimSuffix(n, "*")}
		case strings.HasPrefix(n, "*"):
			m.MatchPattern = &matcherv3.StringMatcher_Suffix{Suffix: strings.TrimPrefix(n, "*")}
		default:
			m.MatchPattern = &matcherv3.StringMatcher_Exact{Exact: n}
		}
		out.Patterns = append(out.Patterns, m)
	}
	return out
}

// CustomHTTPFilters renders the CUSTOM rules (r.Custom) and ext as the
// shadow RBAC filter and the ext_authz filter; nil without CUSTOM rules.
func (r RBAC) CustomHTTPFilters(ext *ExtAuthz) []*hcmv3.HttpFilter {
	if r.Custom == nil || ext == nil {
		return nil
	}
	return []*hcmv3.HttpFilter{
		{Name: RBACHTTPFilter + ".custom", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: build.Any(&rbachttpv3.RBAC{
			ShadowRules: r.Custom, ShadowRulesStatPrefix: extAuthzShadowPrefix})}},
		{Name: ExtAuthzHTTPFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: build.Any(ext.HTTP)}},
	}
}

// CustomNetworkFilters is CustomHTTPFilters for TCP connections: nil
// without CUSTOM rules or when the provider cannot check TCP.
func (r RBAC) CustomNetworkFilters(ext *ExtAuthz) []*listenerv3.Filter {
	if r.Custom == nil || ext == nil || ext.Network == nil {
		return nil
	}
	return []*listenerv3.Filter{
		{Name: RBACNetworkFilter + ".custom", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: build.Any(&rbacnetv3.RBAC{
			StatPrefix: "inbound_rbac_custom.", ShadowRules: r.Custom, ShadowRulesStatPrefix: extAuthzShadowPrefix})}},
		{Name: ExtAuthzNetworkFilter, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: build.Any(ext.Network)}},
	}
}

// FailCustomClosed turns the CUSTOM rules into DENY rules, for a
// workload whose CUSTOM policies cannot be applied (no provider, several,
// an unknown one, an unreachable service): what they would have sent to
// the external authorizer is refused.
func (r *RBAC) FailCustomClosed() {
	if r.Custom == nil {
		return
	}
	if r.Deny == nil {
		r.Deny = &rbacv3.RBAC{Action: rbacv3.RBAC_DENY, Policies: map[string]*rbacv3.Policy{}}
	}
	for name, p := range r.Custom.GetPolicies() {
		r.Deny.Policies[name] = p
	}
	r.Custom, r.Providers = nil, nil
}
