package envoysim

import (
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	extauthznetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/ext_authz/v3"
	rbacnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	uritemplatev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/path/match/uri_template/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// transport is the transport protocol Envoy's tls_inspector reports.
func (r Request) transport() string {
	if r.SNI != "" || r.TLS || r.PeerCert != "" {
		return "tls"
	}
	return "raw_buffer"
}

// handshake applies a chain's transport socket to the connection. Only
// the TLS transport socket (DownstreamTlsContext) is modelled: a plain
// text connection fails its handshake; a required client certificate
// must be presented and its URI SAN must match one of the default
// validation context's SAN matchers, when there are any (Envoy:
// CertificateValidationContext.match_typed_subject_alt_names). It returns
// false, with res.Denied set, when the handshake fails.
func handshake(ts *corev3.TransportSocket, r Request, res *Result) bool {
	ctx := new(tlsv3.DownstreamTlsContext)
	if ts.GetTypedConfig().MessageIs(ctx) {
		if err := ts.GetTypedConfig().UnmarshalTo(ctx); err != nil {
			res.Err = err
			return false
		}
	} else {
		res.Err = fmt.Errorf("transport socket %s (%s) is not modelled", ts.GetName(), ts.GetTypedConfig().GetTypeUrl())
		return false
	}
	if r.transport() != "tls" {
		res.Denied = "TLS handshake: the chain requires TLS and the connection is plain text"
		return false
	}
	if ctx.GetRequireClientCertificate().GetValue() && r.PeerCert == "" {
		res.Denied = "TLS handshake: the chain requires a client certificate and none was presented"
		return false
	}
	if r.PeerCert != "" {
		var sans []*tlsv3.SubjectAltNameMatcher
		switch vc := ctx.GetCommonTlsContext().GetValidationContextType().(type) {
		case *tlsv3.CommonTlsContext_CombinedValidationContext:
			sans = vc.CombinedValidationContext.GetDefaultValidationContext().GetMatchTypedSubjectAltNames()
		case *tlsv3.CommonTlsContext_ValidationContext:
			sans = vc.ValidationContext.GetMatchTypedSubjectAltNames()
		}
		if len(sans) > 0 && !slices.ContainsFunc(sans, func(m *tlsv3.SubjectAltNameMatcher) bool {
			return m.GetSanType() == tlsv3.SubjectAltNameMatcher_URI && stringMatches(m.GetMatcher(), r.PeerCert)
		}) {
			res.Denied = fmt.Sprintf("TLS handshake: client certificate %s matches no accepted subject alt name", r.PeerCert)
			return false
		}
	}
	res.TLSTerminated, res.Peer = true, r.PeerCert
	return true
}

// rbacInput is what RBAC matchers read.
type rbacInput struct {
	r    Request
	res  *Result
	http bool // an HTTP request (else a TCP connection)
}

// networkRBAC applies an envoy.filters.network.rbac filter; false when it
// refuses the connection.
func networkRBAC(a *anypb.Any, r Request, res *Result) (handled, ok bool) {
	cfg := new(rbacnetv3.RBAC)
	if !a.MessageIs(cfg) {
		return false, true
	}
	if err := a.UnmarshalTo(cfg); err != nil {
		res.Err = err
		return true, false
	}
	if cfg.GetShadowRules() != nil && !shadowRBAC(cfg.GetShadowRules(), cfg.GetShadowRulesStatPrefix(), "envoy.filters.network.rbac", rbacInput{r: r, res: res}) {
		return true, false
	}
	return true, applyRBAC(cfg.GetRules(), rbacInput{r: r, res: res})
}

// httpRBAC applies an envoy.filters.http.rbac filter.
func httpRBAC(a *anypb.Any, r Request, res *Result) (handled, ok bool) {
	cfg := new(rbachttpv3.RBAC)
	if !a.MessageIs(cfg) {
		return false, true
	}
	if err := a.UnmarshalTo(cfg); err != nil {
		res.Err = err
		return true, false
	}
	if cfg.GetShadowRules() != nil && !shadowRBAC(cfg.GetShadowRules(), cfg.GetShadowRulesStatPrefix(), "envoy.filters.http.rbac", rbacInput{r: r, res: res, http: true}) {
		return true, false
	}
	return true, applyRBAC(cfg.GetRules(), rbacInput{r: r, res: res, http: true})
}

// shadowRBAC evaluates shadow rules: they decide nothing, and write their
// result into the request's dynamic metadata under the filter's name:
// PREFIXshadow_engine_result ("allowed" or "denied") and, when a policy
// matched, PREFIXshadow_effective_policy_id (the first by name). false
// only on an error (res.Err).
func shadowRBAC(rules *rbacv3.RBAC, prefix, filter string, in rbacInput) bool {
	matched, err := matchingPolicies(rules, in)
	if err != nil {
		in.res.Err = err
		return false
	}
	denied := (rules.GetAction() == rbacv3.RBAC_DENY) == (len(matched) > 0)
	md := map[string]any{prefix + "shadow_engine_result": "allowed"}
	if denied {
		md[prefix+"shadow_engine_result"] = "denied"
	}
	if len(matched) > 0 {
		md[prefix+"shadow_effective_policy_id"] = matched[0]
	}
	if in.res.Metadata == nil {
		in.res.Metadata = map[string]map[string]any{}
	}
	if in.res.Metadata[filter] == nil {
		in.res.Metadata[filter] = map[string]any{}
	}
	maps.Copy(in.res.Metadata[filter], md)
	return true
}

// matchingPolicies are the names of rules' policies that match, sorted.
func matchingPolicies(rules *rbacv3.RBAC, in rbacInput) ([]string, error) {
	names := make([]string, 0, len(rules.GetPolicies()))
	for name := range rules.GetPolicies() {
		names = append(names, name)
	}
	sort.Strings(names)
	var matched []string
	for _, name := range names {
		ok, err := policyMatches(rules.GetPolicies()[name], in)
		if err != nil {
			return nil, fmt.Errorf("rbac policy %s: %w", name, err)
		}
		if ok {
			matched = append(matched, name)
		}
	}
	return matched, nil
}

// extAuthz applies an ext_authz filter (HTTP or network): when its
// filter_enabled_metadata matches the request's metadata (or it has
// none), the external authorizer is asked — Result.ExtAuthz records the
// cluster — and answers as Request.ExtAuthzDenies says.
func extAuthz(a *anypb.Any, r Request, res *Result) (handled, ok bool) {
	var enabled *matcherv3.MetadataMatcher
	var cluster string
	httpCfg, netCfg := new(extauthzv3.ExtAuthz), new(extauthznetv3.ExtAuthz)
	switch {
	case a.MessageIs(httpCfg):
		if err := a.UnmarshalTo(httpCfg); err != nil {
			res.Err = err
			return true, false
		}
		enabled = httpCfg.GetFilterEnabledMetadata()
		cluster = httpCfg.GetGrpcService().GetEnvoyGrpc().GetClusterName()
		if cluster == "" {
			cluster = httpCfg.GetHttpService().GetServerUri().GetCluster()
		}
	case a.MessageIs(netCfg):
		if err := a.UnmarshalTo(netCfg); err != nil {
			res.Err = err
			return true, false
		}
		enabled = netCfg.GetFilterEnabledMetadata()
		cluster = netCfg.GetGrpcService().GetEnvoyGrpc().GetClusterName()
	default:
		return false, true
	}
	if enabled != nil {
		on, err := metadataMatches(enabled, res.Metadata)
		if err != nil {
			res.Err = fmt.Errorf("ext_authz filter_enabled_metadata: %w", err)
			return true, false
		}
		if !on {
			return true, true
		}
	}
	res.ExtAuthz = append(res.ExtAuthz, cluster)
	if r.ExtAuthzDenies {
		res.Denied = "ext_authz: denied by the authorizer at " + cluster
		return true, false
	}
	return true, true
}

// applyRBAC evaluates one RBAC config (Envoy: RBAC filter): ALLOW lets
// through what some policy matches, DENY refuses what some policy
// matches, LOG records the matching policies and lets everything
// through. A nil rules allows everything. false means refused (or an
// error, in res.Err).
func applyRBAC(rules *rbacv3.RBAC, in rbacInput) bool {
	if rules == nil {
		return true
	}
	matched, err := matchingPolicies(rules, in)
	if err != nil {
		in.res.Err = err
		return false
	}
	switch rules.GetAction() {
	case rbacv3.RBAC_ALLOW:
		if len(matched) == 0 {
			in.res.Denied = "rbac: no ALLOW policy matches"
			return false
		}
		in.res.Allowed = append(in.res.Allowed, matched...)
	case rbacv3.RBAC_DENY:
		if len(matched) > 0 {
			in.res.Denied = "rbac: denied by " + strings.Join(matched, ", ")
			return false
		}
	case rbacv3.RBAC_LOG:
		in.res.Audited = append(in.res.Audited, matched...)
	default:
		in.res.Err = fmt.Errorf("rbac action %s is not modelled", rules.GetAction())
		return false
	}
	return true
}

func policyMatches(p *rbacv3.Policy, in rbacInput) (bool, error) {
	if p.GetCondition() != nil || p.GetCheckedCondition() != nil {
		return false, fmt.Errorf("CEL conditions are not modelled")
	}
	perm, err := anyOf(p.GetPermissions(), in, permissionMatches)
	if err != nil || !perm {
		return false, err
	}
	return anyOf(p.GetPrincipals(), in, principalMatches)
}

func anyOf[T any](list []T, in rbacInput, fn func(T, rbacInput) (bool, error)) (bool, error) {
	for _, x := range list {
		ok, err := fn(x, in)
		if err != nil {
			return false, err
		}
		if ok {
			return true, nil
		}
	}
	return false, nil
}

func allOf[T any](list []T, in rbacInput, fn func(T, rbacInput) (bool, error)) (bool, error) {
	for _, x := range list {
		ok, err := fn(x, in)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// permissionMatches evaluates what a request or connection does. HTTP
// matchers (header, url_path) in a network filter are an error: the
// generators must never put them there.
func permissionMatches(p *rbacv3.Permission, in rbacInput) (bool, error) {
	switch rule := p.GetRule().(type) {
	case *rbacv3.Permission_Any:
		return rule.Any, nil
	case *rbacv3.Permission_AndRules:
		return allOf(rule.AndRules.GetRules(), in, permissionMatches)
	case *rbacv3.Permission_OrRules:
		return anyOf(rule.OrRules.GetRules(), in, permissionMatches)
	case *rbacv3.Permission_NotRule:
		ok, err := permissionMatches(rule.NotRule, in)
		return !ok, err
	case *rbacv3.Permission_DestinationPort:
		return in.r.Port == rule.DestinationPort, nil
	case *rbacv3.Permission_DestinationIp:
		return inCIDR(in.r.IP, rule.DestinationIp)
	case *rbacv3.Permission_RequestedServerName:
		return stringMatches(rule.RequestedServerName, in.r.SNI), nil
	case *rbacv3.Permission_Header:
		if !in.http {
			return false, fmt.Errorf("a header matcher in a network RBAC filter")
		}
		return headerMatches(rule.Header, in.r), nil
	case *rbacv3.Permission_UrlPath:
		if !in.http {
			return false, fmt.Errorf("a url_path matcher in a network RBAC filter")
		}
		path, _, _ := strings.Cut(in.r.Path, "?")
		return stringMatches(rule.UrlPath.GetPath(), path), nil
	case *rbacv3.Permission_UriTemplate:
		if !in.http {
			return false, fmt.Errorf("a uri_template matcher in a network RBAC filter")
		}
		var cfg uritemplatev3.UriTemplateMatchConfig
		if err := rule.UriTemplate.GetTypedConfig().UnmarshalTo(&cfg); err != nil {
			return false, fmt.Errorf("uri_template %q: %v", rule.UriTemplate.GetName(), err)
		}
		re, err := uriTemplateRegexp(cfg.GetPathTemplate())
		if err != nil {
			return false, err
		}
		path, _, _ := strings.Cut(in.r.Path, "?")
		path, _, _ = strings.Cut(path, "#")
		return re.MatchString(path), nil
	}
	return false, fmt.Errorf("permission %T is not modelled", p.GetRule())
}

// principalMatches evaluates who sends a request or connection.
func principalMatches(p *rbacv3.Principal, in rbacInput) (bool, error) {
	switch id := p.GetIdentifier().(type) {
	case *rbacv3.Principal_Any:
		return id.Any, nil
	case *rbacv3.Principal_AndIds:
		return allOf(id.AndIds.GetIds(), in, principalMatches)
	case *rbacv3.Principal_OrIds:
		return anyOf(id.OrIds.GetIds(), in, principalMatches)
	case *rbacv3.Principal_NotId:
		ok, err := principalMatches(id.NotId, in)
		return !ok, err
	case *rbacv3.Principal_Authenticated_:
		// Envoy: only a connection with a verified client certificate is
		// authenticated; without principal_name any such peer matches.
		if !in.res.TLSTerminated || in.res.Peer == "" {
			return false, nil
		}
		if m := id.Authenticated.GetPrincipalName(); m != nil {
			return stringMatches(m, in.res.Peer), nil
		}
		return true, nil
	case *rbacv3.Principal_DirectRemoteIp:
		return inCIDR(in.r.SourceIP, id.DirectRemoteIp)
	case *rbacv3.Principal_RemoteIp:
		// No X-Forwarded-For handling on inbound listeners: the
		// downstream address.
		return inCIDR(in.r.SourceIP, id.RemoteIp)
	case *rbacv3.Principal_Header:
		if !in.http {
			return false, fmt.Errorf("a header matcher in a network RBAC filter")
		}
		return headerMatches(id.Header, in.r), nil
	case *rbacv3.Principal_Metadata:
		if !in.http {
			return false, fmt.Errorf("a metadata matcher in a network RBAC filter")
		}
		//lint:ignore SA1019 the generators emit the deprecated form (see gen.claimMatcher)
		return metadataMatches(id.Metadata, in.res.Metadata)
	}
	return false, fmt.Errorf("principal %T is not modelled", p.GetIdentifier())
}

func inCIDR(addr string, r *corev3.CidrRange) (bool, error) {
	pf, err := netip.ParsePrefix(fmt.Sprintf("%s/%d", r.GetAddressPrefix(), r.GetPrefixLen().GetValue()))
	if err != nil {
		return false, fmt.Errorf("cidr %v: %w", r, err)
	}
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return false, nil // no (or no usable) address: no match
	}
	return pf.Contains(ip), nil
}

// metadataMatches evaluates a metadata matcher against the request's
// dynamic metadata (by filter name): the value at the path must exist and
// match (string, presence, or one element of a list).
func metadataMatches(m *matcherv3.MetadataMatcher, md map[string]map[string]any) (bool, error) {
	var v any
	if f := md[m.GetFilter()]; f != nil {
		v = f
	}
	for _, seg := range m.GetPath() {
		obj, ok := v.(map[string]any)
		if !ok {
			v = nil
			break
		}
		v = obj[seg.GetKey()]
	}
	ok, err := valueMatches(m.GetValue(), v)
	if m.GetInvert() {
		return !ok, err
	}
	return ok, err
}

func valueMatches(m *matcherv3.ValueMatcher, v any) (bool, error) {
	switch p := m.GetMatchPattern().(type) {
	case *matcherv3.ValueMatcher_PresentMatch:
		return (v != nil) == p.PresentMatch, nil
	case *matcherv3.ValueMatcher_StringMatch:
		s, ok := v.(string)
		return ok && stringMatches(p.StringMatch, s), nil
	case *matcherv3.ValueMatcher_ListMatch:
		list, ok := v.([]any)
		if !ok {
			return false, nil
		}
		for _, e := range list {
			if ok, err := valueMatches(p.ListMatch.GetOneOf(), e); err != nil || ok {
				return ok, err
			}
		}
		return false, nil
	}
	return false, fmt.Errorf("value matcher %T is not modelled", m.GetMatchPattern())
}

// uriTemplateLiteral is what a literal segment of a uri_template may hold
// (RFC 3986 pchar without '*'; Envoy's uri_template_internal kLiteral).
const uriTemplateLiteral = `a-zA-Z0-9-._~%!$&'()+,;:@=`

var uriTemplateLiteralRE = regexp.MustCompile("^[" + uriTemplateLiteral + "]+$")

// uriTemplateRegexp is Envoy's envoy.path.match.uri_template matcher: a
// template "/"-separated into segments, each "*" (one non-empty
// segment), "**" (any characters, slashes included; at most one, after
// every other operator) or a literal (only the last may be empty: a
// trailing /), matched against the whole path
// without query or fragment. Variables ({name}, {name=…}) are not
// modelled (nave does not generate them).
func uriTemplateRegexp(tmpl string) (*regexp.Regexp, error) {
	if !strings.HasPrefix(tmpl, "/") {
		return nil, fmt.Errorf("uri_template %q: must start with /", tmpl)
	}
	var b strings.Builder
	b.WriteString("^")
	sawAny := false
	segs := strings.Split(tmpl[1:], "/")
	for i, seg := range segs {
		b.WriteString("/")
		if seg == "" && i < len(segs)-1 {
			return nil, fmt.Errorf("uri_template %q: empty segment", tmpl)
		}
		switch {
		case seg == "*" || seg == "**":
			if sawAny {
				return nil, fmt.Errorf("uri_template %q: ** must be the last operator", tmpl)
			}
			if seg == "*" {
				b.WriteString("[" + uriTemplateLiteral + "]+")
			} else {
				sawAny = true
				b.WriteString("[" + uriTemplateLiteral + "/]*")
			}
		case strings.ContainsAny(seg, "{}"):
			return nil, fmt.Errorf("uri_template %q: variables are not modelled", tmpl)
		case seg == "" || uriTemplateLiteralRE.MatchString(seg):
			b.WriteString(regexp.QuoteMeta(seg))
		default:
			return nil, fmt.Errorf("uri_template %q: invalid literal %q", tmpl, seg)
		}
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}
