package policy

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	uritemplatev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/path/match/uri_template/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/navemesh/nave/xds/gen/build"
)

// wildcard is an Istio match value: exact, "*" (present), "prefix*" or
// "*suffix".
type wildcard struct {
	kind  byte // '=', '*', 'p', 's'
	value string
}

// parseWildcard reads v; a '*' anywhere but at one end is refused.
func parseWildcard(v string) (wildcard, error) {
	switch {
	case v == "":
		return wildcard{}, fmt.Errorf("an empty value matches nothing Istio can express")
	case v == "*":
		return wildcard{kind: '*'}, nil
	case strings.Count(v, "*") > 1 || (strings.Contains(v, "*") && !strings.HasPrefix(v, "*") && !strings.HasSuffix(v, "*")):
		return wildcard{}, fmt.Errorf("%q: a wildcard is supported only as the whole value, a prefix (\"*x\") or a suffix (\"x*\")", v)
	case strings.HasPrefix(v, "*"):
		return wildcard{kind: 's', value: v[1:]}, nil
	case strings.HasSuffix(v, "*"):
		return wildcard{kind: 'p', value: v[:len(v)-1]}, nil
	}
	return wildcard{kind: '=', value: v}, nil
}

// stringMatcher renders w, with prefix added before the value of exact
// and prefix forms.
func (w wildcard) stringMatcher(prefix string, ignoreCase bool) *matcherv3.StringMatcher {
	m := &matcherv3.StringMatcher{IgnoreCase: ignoreCase}
	switch w.kind {
	case '*':
		m.MatchPattern = &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: ".+"}}
		m.IgnoreCase = false
	case 'p':
		m.MatchPattern = &matcherv3.StringMatcher_Prefix{Prefix: prefix + w.value}
	case 's':
		m.MatchPattern = &matcherv3.StringMatcher_Suffix{Suffix: w.value}
	default:
		m.MatchPattern = &matcherv3.StringMatcher_Exact{Exact: prefix + w.value}
	}
	return m
}

// principal matches the peer's identity (the URI SAN of its client
// certificate): "*" any authenticated peer, "x*" / "*x" prefix / suffix,
// else exact. A principal whose trust domain is the mesh's, one of its
// aliases, or "cluster.local" (Istio's name for the local trust domain)
// matches that identity in the mesh's trust domain and in every alias, as
// Istio expands it (trustDomainAliases); one of another trust domain, or
// starting with "*", matches as written.
func (t *ruleTranslator) principal(v string) (*rbacv3.Principal, error) {
	if strings.Contains(v, "://") {
		return nil, fmt.Errorf("principal %q: write principals without a scheme, as TRUST_DOMAIN/ns/NAMESPACE/sa/SERVICE_ACCOUNT", v)
	}
	w, err := parseWildcard(v)
	if err != nil {
		return nil, fmt.Errorf("principal %w", err)
	}
	if w.kind == '*' {
		// Authenticated without a name: any peer with a verified certificate.
		return &rbacv3.Principal{Identifier: &rbacv3.Principal_Authenticated_{Authenticated: &rbacv3.Principal_Authenticated{}}}, nil
	}
	variants := t.withAliases(w)
	ids := make([]*rbacv3.Principal, 0, len(variants))
	for _, x := range variants {
		ids = append(ids, authenticated(x.stringMatcher(spiffePrefix, false)))
	}
	return orIDs(ids), nil
}

// withAliases expands a principal of the local trust domain into one per
// trust domain of the mesh (its own, then its aliases); others are
// returned as they are.
func (t *ruleTranslator) withAliases(w wildcard) []wildcard {
	if len(t.aliases) == 0 || w.kind == 's' {
		return []wildcard{w}
	}
	td, rest, ok := strings.Cut(w.value, "/")
	if !ok && w.kind == '=' {
		return []wildcard{w}
	}
	if td != t.trustDomain && td != localTrustDomain && !slices.Contains(t.aliases, td) {
		return []wildcard{w}
	}
	sep := ""
	if ok {
		sep = "/"
	}
	out := make([]wildcard, 0, 1+len(t.aliases))
	for _, d := range append([]string{t.trustDomain}, t.aliases...) {
		out = append(out, wildcard{kind: w.kind, value: d + sep + rest})
	}
	return out
}

// localTrustDomain is how Istio config names the local trust domain,
// whatever it is.
const localTrustDomain = "cluster.local"

func authenticated(m *matcherv3.StringMatcher) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_Authenticated_{Authenticated: &rbacv3.Principal_Authenticated{PrincipalName: m}}}
}

// namespacePrincipal matches peers whose identity is in a namespace
// (".../ns/NAMESPACE/..."); needs mTLS.
func namespacePrincipal(v string) (*rbacv3.Principal, error) {
	w, err := parseWildcard(v)
	if err != nil {
		return nil, fmt.Errorf("namespace %w", err)
	}
	if strings.Contains(w.value, "/") {
		return nil, fmt.Errorf("namespace %q contains '/'", v)
	}
	var re string
	switch w.kind {
	case '*':
		re = `.*/ns/[^/]+/.*`
	case 'p':
		re = `.*/ns/` + regexp.QuoteMeta(w.value) + `[^/]*/.*`
	case 's':
		re = `.*/ns/[^/]*` + regexp.QuoteMeta(w.value) + `/.*`
	default:
		re = `.*/ns/` + regexp.QuoteMeta(w.value) + `/.*`
	}
	return authenticated(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: re}}}), nil
}

// trustDomainPrincipal matches peers whose identity is in a trust domain
// (Istio's from.source.trustDomains and source.trustDomain, deprecated in
// favour of principals and still honoured): "spiffe://DOMAIN/" as a
// prefix, "*" any SPIFFE identity, "x*" / "*x" a domain of that prefix /
// suffix; needs mTLS.
func trustDomainPrincipal(v string) (*rbacv3.Principal, error) {
	w, err := parseWildcard(v)
	if err != nil {
		return nil, fmt.Errorf("trust domain %w", err)
	}
	if strings.Contains(w.value, "/") {
		return nil, fmt.Errorf("trust domain %q contains '/'", v)
	}
	var m *matcherv3.StringMatcher
	switch w.kind {
	case '*':
		m = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: spiffePrefix}}
	case '=':
		m = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: spiffePrefix + w.value + "/"}}
	case 'p':
		m = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{
			Regex: regexp.QuoteMeta(spiffePrefix+w.value) + `[^/]*/.*`}}}
	default: // 's'
		m = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{
			Regex: regexp.QuoteMeta(spiffePrefix) + `[^/]*` + regexp.QuoteMeta(w.value) + `/.*`}}}
	}
	return authenticated(m), nil
}

// serviceAccount matches "NAMESPACE/NAME" in the mesh's trust domain and
// its aliases.
func (t *ruleTranslator) serviceAccount(v string) (*rbacv3.Principal, error) {
	ns, name, ok := strings.Cut(v, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") || strings.Contains(v, "*") {
		return nil, fmt.Errorf("service account %q is not of the form NAMESPACE/NAME", v)
	}
	ids := make([]*rbacv3.Principal, 0, 1+len(t.aliases))
	for _, td := range append([]string{t.trustDomain}, t.aliases...) {
		ids = append(ids, authenticated(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{
			Exact: spiffePrefix + td + "/ns/" + ns + "/sa/" + name}}))
	}
	return orIDs(ids), nil
}

// cidr parses an IP or CIDR block.
func cidr(v string) (*corev3.CidrRange, error) {
	if ip, err := netip.ParseAddr(v); err == nil {
		return &corev3.CidrRange{AddressPrefix: ip.String(), PrefixLen: wrapperspb.UInt32(uint32(ip.BitLen()))}, nil
	}
	pf, err := netip.ParsePrefix(v)
	if err != nil {
		return nil, fmt.Errorf("%q is neither an IP address nor a CIDR block", v)
	}
	return &corev3.CidrRange{AddressPrefix: pf.Addr().String(), PrefixLen: wrapperspb.UInt32(uint32(pf.Bits()))}, nil
}

// directRemoteIP matches the downstream connection's address.
func directRemoteIP(v string) (*rbacv3.Principal, error) {
	r, err := cidr(v)
	if err != nil {
		return nil, err
	}
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_DirectRemoteIp{DirectRemoteIp: r}}, nil
}

// remoteIP matches the original client address (X-Forwarded-For or PROXY
// protocol, as the listener trusts them; on a sidecar's inbound listener,
// the downstream address).
func remoteIP(v string) (*rbacv3.Principal, error) {
	r, err := cidr(v)
	if err != nil {
		return nil, err
	}
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_RemoteIp{RemoteIp: r}}, nil
}

func destinationIP(v string) (*rbacv3.Permission, error) {
	r, err := cidr(v)
	if err != nil {
		return nil, err
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_DestinationIp{DestinationIp: r}}, nil
}

func portPermission(v string) (*rbacv3.Permission, error) {
	n, err := strconv.ParseUint(v, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("port %q is not a number in 0-65535", v)
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_DestinationPort{DestinationPort: uint32(n)}}, nil
}

func sniPermission(v string) (*rbacv3.Permission, error) {
	w, err := parseWildcard(v)
	if err != nil {
		return nil, fmt.Errorf("server name %w", err)
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_RequestedServerName{RequestedServerName: w.stringMatcher("", false)}}, nil
}

func rbacHeader(name string, m *matcherv3.StringMatcher) *routev3.HeaderMatcher {
	return &routev3.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: m}}
}

func headerPermission(name string) func(string) (*rbacv3.Permission, error) {
	return func(v string) (*rbacv3.Permission, error) {
		w, err := parseWildcard(v)
		if err != nil {
			return nil, fmt.Errorf("header value %w", err)
		}
		return &rbacv3.Permission{Rule: &rbacv3.Permission_Header{Header: rbacHeader(name, w.stringMatcher("", false))}}, nil
	}
}

// hostPermission matches the request's authority, case-insensitively; an
// exact host also matches it with any port.
func hostPermission(v string) (*rbacv3.Permission, error) {
	w, err := parseWildcard(v)
	if err != nil {
		return nil, fmt.Errorf("host %w", err)
	}
	p := &rbacv3.Permission{Rule: &rbacv3.Permission_Header{Header: rbacHeader(":authority", w.stringMatcher("", true))}}
	if w.kind != '=' || strings.Contains(w.value, ":") {
		return p, nil
	}
	withPort := wildcard{kind: 'p', value: w.value + ":"}
	return orPerms([]*rbacv3.Permission{p, {Rule: &rbacv3.Permission_Header{Header: rbacHeader(":authority", withPort.stringMatcher("", true))}}}), nil
}

func methodPermission(v string) (*rbacv3.Permission, error) {
	w, err := parseWildcard(v)
	if err != nil {
		return nil, fmt.Errorf("method %w", err)
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_Header{Header: rbacHeader(":method", w.stringMatcher("", false))}}, nil
}

// pathPermission matches the request path without its query string.
// A path template ({*} one segment, {**} any number of segments, see
// pathTemplate) becomes, as in Istio, Envoy's uri_template matcher; for
// a proxyless gRPC server (grpc-go's RBAC has no uri_template and would
// refuse the whole listener) the same match as a regular expression.
func pathPermission(grpc bool) func(string) (*rbacv3.Permission, error) {
	return func(v string) (*rbacv3.Permission, error) {
		if strings.ContainsAny(v, "{}") {
			tmpl, re, err := pathTemplate(v)
			if err != nil {
				return nil, err
			}
			if grpc {
				return &rbacv3.Permission{Rule: &rbacv3.Permission_UrlPath{UrlPath: &matcherv3.PathMatcher{
					Rule: &matcherv3.PathMatcher_Path{Path: &matcherv3.StringMatcher{
						MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: re}}}}}}}, nil
			}
			return &rbacv3.Permission{Rule: &rbacv3.Permission_UriTemplate{UriTemplate: &corev3.TypedExtensionConfig{
				Name:        uriTemplateExtension,
				TypedConfig: build.Any(&uritemplatev3.UriTemplateMatchConfig{PathTemplate: tmpl}),
			}}}, nil
		}
		w, err := parseWildcard(v)
		if err != nil {
			return nil, fmt.Errorf("path %w", err)
		}
		return &rbacv3.Permission{Rule: &rbacv3.Permission_UrlPath{UrlPath: &matcherv3.PathMatcher{
			Rule: &matcherv3.PathMatcher_Path{Path: w.stringMatcher("", false)}}}}, nil
	}
}

// uriTemplateExtension names the uri_template matcher in RBAC permissions
// (Istio's name).
const uriTemplateExtension = "uri-template"

// Path template operators, and what a literal segment of a template may
// hold (RFC 3986 pchar, as Envoy's uri_template and Istio's validation
// take it).
const (
	matchOneTemplate = "{*}"
	matchAnyTemplate = "{**}"
	templateLiteral  = `a-zA-Z0-9-._~%!$&'()+,;:@=`
	// maxPathTemplate is the longest uri_template Envoy takes (the
	// literal characters are ASCII, so bytes are runes).
	maxPathTemplate = 256
)

var templateLiteralRE = regexp.MustCompile("^[" + templateLiteral + "]+$")

// pathTemplate validates an AuthorizationPolicy path template as Istio
// does — it starts with /, every segment is {*}, {**} or a literal, {**}
// is the last operator — and returns Envoy's form of it ({*} → *, {**} → **) and the
// equivalent regular expression (Envoy's: * is one non-empty segment,
// ** any characters of a path, slashes included).
func pathTemplate(v string) (tmpl, re string, err error) {
	if !strings.HasPrefix(v, "/") {
		// Envoy refuses such a template, and with it the whole listener.
		return "", "", fmt.Errorf("path template %q: must start with /", v)
	}
	sawAny := false
	for seg := range strings.SplitSeq(strings.Trim(v, "/"), "/") {
		switch {
		case seg == matchOneTemplate || seg == matchAnyTemplate:
			if sawAny {
				return "", "", fmt.Errorf("path template %q: {**} must be the last operator", v)
			}
			sawAny = seg == matchAnyTemplate
		case strings.ContainsAny(seg, "{}"):
			return "", "", fmt.Errorf("path template %q: segment %q: '{' and '}' only in a whole segment {*} or {**}", v, seg)
		case !templateLiteralRE.MatchString(seg):
			return "", "", fmt.Errorf("path template %q: segment %q is not a valid literal (letters, digits and -._~%%!$&'()+,;:@=)", v, seg)
		}
	}
	tmpl = strings.NewReplacer(matchOneTemplate, "*", matchAnyTemplate, "**").Replace(v)
	if len(tmpl) > maxPathTemplate {
		return "", "", fmt.Errorf("path template %q: Envoy takes templates of at most %d characters", v, maxPathTemplate)
	}
	var b strings.Builder
	for i, part := range strings.Split(v, "/") {
		if i > 0 {
			b.WriteString("/")
		}
		switch part {
		case matchOneTemplate:
			b.WriteString("[" + templateLiteral + "]+")
		case matchAnyTemplate:
			b.WriteString("[" + templateLiteral + "/]*")
		default:
			b.WriteString(regexp.QuoteMeta(part))
		}
	}
	return tmpl, b.String(), nil
}

// combine is one of xs when there is only one, all() when there is none,
// and join(xs) otherwise.
func combine[T any](xs []T, all func() T, join func([]T) T) T {
	switch len(xs) {
	case 0:
		return all()
	case 1:
		return xs[0]
	}
	return join(xs)
}

func anyPrincipal() *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_Any{Any: true}}
}

func anyPermission() *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_Any{Any: true}}
}

func orIDs(ids []*rbacv3.Principal) *rbacv3.Principal {
	return combine(ids, anyPrincipal, func(ids []*rbacv3.Principal) *rbacv3.Principal {
		return &rbacv3.Principal{Identifier: &rbacv3.Principal_OrIds{OrIds: &rbacv3.Principal_Set{Ids: ids}}}
	})
}

func andIDs(ids []*rbacv3.Principal) *rbacv3.Principal {
	return combine(ids, anyPrincipal, func(ids []*rbacv3.Principal) *rbacv3.Principal {
		return &rbacv3.Principal{Identifier: &rbacv3.Principal_AndIds{AndIds: &rbacv3.Principal_Set{Ids: ids}}}
	})
}

func orPerms(ps []*rbacv3.Permission) *rbacv3.Permission {
	return combine(ps, anyPermission, func(ps []*rbacv3.Permission) *rbacv3.Permission {
		return &rbacv3.Permission{Rule: &rbacv3.Permission_OrRules{OrRules: &rbacv3.Permission_Set{Rules: ps}}}
	})
}

func andPerms(ps []*rbacv3.Permission) *rbacv3.Permission {
	return combine(ps, anyPermission, func(ps []*rbacv3.Permission) *rbacv3.Permission {
		return &rbacv3.Permission{Rule: &rbacv3.Permission_AndRules{AndRules: &rbacv3.Permission_Set{Rules: ps}}}
	})
}
