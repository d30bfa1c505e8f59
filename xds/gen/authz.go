package gen

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	securityv1beta1 "istio.io/api/security/v1beta1"

	"github.com/navemesh/nave/xds/mesh"
)

// SelectAuthorizationPolicies returns the AuthorizationPolicies that
// apply to a workload in namespace with labels, in snapshot order
// (namespace/name): those of the root namespace (mesh-wide; a selector
// there matches workloads of every namespace) and those of the workload's
// namespace, each without a selector or with one that matches the labels.
// Policies that attach by targetRef(s) (gateways and waypoints) select no
// sidecar; they are reported as unsupported.
func SelectAuthorizationPolicies(s *mesh.Snapshot, namespace string, labels map[string]string, report func(mesh.Problem)) []*mesh.Config {
	var out []*mesh.Config
	for _, c := range s.AuthorizationPolicies {
		ns := c.Object.Namespace
		if ns != namespace && ns != mesh.RootNamespace {
			continue
		}
		ap := c.AuthorizationPolicy()
		if ap.GetTargetRef() != nil || len(ap.GetTargetRefs()) > 0 {
			if report != nil {
				report(mesh.Problem{Resource: c.Ref(), Field: "spec.targetRefs",
					Reason: "policies attached by targetRef (gateways, waypoints) are not supported yet; it applies to no workload"})
			}
			continue
		}
		if mesh.Matches(ap.GetSelector().GetMatchLabels(), labels) {
			out = append(out, c)
		}
	}
	return out
}

// RBAC is what a workload's AuthorizationPolicies become for one kind of
// traffic: Envoy RBAC configs to apply in order, each nil when no policy
// needs it. Audit logs (action LOG) what AUDIT policies match and never
// denies; Deny refuses what DENY policies match; Allow refuses what no
// ALLOW policy matches and is present as soon as one ALLOW policy selects
// the workload, even one without rules (which allows nothing).
type RBAC struct {
	Audit, Deny, Allow *rbacv3.RBAC
}

// Empty reports whether no policy applies.
func (r RBAC) Empty() bool { return r.Audit == nil && r.Deny == nil && r.Allow == nil }

// RBACTarget says what RBAC is built for.
type RBACTarget struct {
	// TrustDomain completes serviceAccounts into identities.
	TrustDomain string
	// TCP builds for TCP connections (network RBAC) instead of HTTP.
	TCP bool
	// GRPC builds for a proxyless gRPC server (grpc-go's RBAC filter,
	// gRFC A41), which refuses a whole listener whose RBAC matches the
	// :scheme header or a grpc- header: such conditions are reported and
	// fail closed instead.
	GRPC bool
}

// BuildRBAC translates AuthorizationPolicies into Envoy RBAC for HTTP
// traffic or, with target.TCP, for TCP connections (network RBAC). Each
// rule becomes one RBAC policy named "ns[NS]-policy[NAME]-rule[I]".
//
// Fields nave cannot express (an unsupported condition key, a malformed
// principal or address, path templates, ...) are reported, naming the
// policy and field, and fail closed, as Istio does for invalid rules and
// for HTTP-only fields on TCP traffic: in an ALLOW policy the whole rule
// matches nothing (it allows nothing); in a DENY policy the field is left
// out of the rule, which then matches at least everything it would have
// matched (it denies more, never less). AUDIT rules are treated like DENY
// ones (they log more, never less). HTTP-only fields (hosts, methods,
// paths, request principals, request headers and JWT conditions) on TCP
// traffic are handled the same way without a report: that is Istio's
// documented behaviour, not an error.
//
// Action CUSTOM (an external authorizer) is refused by validation; should
// a CUSTOM policy reach generation it is reported and fails closed: what
// its rules match is denied.
func BuildRBAC(policies []*mesh.Config, target RBACTarget, report func(mesh.Problem)) RBAC {
	if report == nil {
		report = func(mesh.Problem) {}
	}
	var out RBAC
	add := func(dst **rbacv3.RBAC, action rbacv3.RBAC_Action, name string, p *rbacv3.Policy) {
		if *dst == nil {
			*dst = &rbacv3.RBAC{Action: action, Policies: map[string]*rbacv3.Policy{}}
		}
		if p != nil {
			(*dst).Policies[name] = p
		}
	}
	for _, c := range policies {
		ap := c.AuthorizationPolicy()
		action := ap.GetAction()
		if action == securityv1beta1.AuthorizationPolicy_CUSTOM {
			report(mesh.Problem{Resource: c.Ref(), Field: "spec.action",
				Reason: "action CUSTOM (an external authorizer) is not supported; requests its rules match are denied (fail closed)"})
			action = securityv1beta1.AuthorizationPolicy_DENY
		}
		if action == securityv1beta1.AuthorizationPolicy_ALLOW && out.Allow == nil {
			// An ALLOW policy turns on deny-by-default even without rules.
			add(&out.Allow, rbacv3.RBAC_ALLOW, "", nil)
		}
		for i, r := range ap.GetRules() {
			t := &ruleTranslator{c: c, field: "spec.rules[" + strconv.Itoa(i) + "]", allow: action == securityv1beta1.AuthorizationPolicy_ALLOW,
				tcp: target.TCP, grpc: target.GRPC, trustDomain: target.TrustDomain, report: report}
			p := t.policy(r)
			name := "ns[" + c.Object.Namespace + "]-policy[" + c.Object.Name + "]-rule[" + strconv.Itoa(i) + "]"
			switch action {
			case securityv1beta1.AuthorizationPolicy_ALLOW:
				add(&out.Allow, rbacv3.RBAC_ALLOW, name, p)
			case securityv1beta1.AuthorizationPolicy_DENY:
				add(&out.Deny, rbacv3.RBAC_DENY, name, p)
			case securityv1beta1.AuthorizationPolicy_AUDIT:
				add(&out.Audit, rbacv3.RBAC_LOG, name, p)
			}
		}
	}
	return out
}

// ruleTranslator turns one rule into an RBAC policy.
type ruleTranslator struct {
	c           *mesh.Config
	field       string
	allow       bool // fail closed by dropping the rule (else the field)
	tcp         bool
	grpc        bool
	trustDomain string
	report      func(mesh.Problem)
	// dropped is set when an ALLOW rule cannot be expressed.
	dropped bool
}

// unsupported reports a field that cannot be translated and applies the
// fail-closed rule (see BuildRBAC).
func (t *ruleTranslator) unsupported(field, format string, args ...any) {
	consequence := "this rule allows nothing (fail closed)"
	if !t.allow {
		consequence = "the field is left out of this rule, which then matches more (fail closed)"
	}
	t.report(mesh.Problem{Resource: t.c.Ref(), Field: field, Reason: fmt.Sprintf(format, args...) + "; " + consequence})
	if t.allow {
		t.dropped = true
	}
}

// httpOnly applies Istio's rule for an HTTP-only field on TCP traffic
// (ALLOW: the rule matches nothing; DENY: the field is ignored).
func (t *ruleTranslator) httpOnly() bool {
	if t.tcp && t.allow {
		t.dropped = true
	}
	return t.tcp
}

// policy translates rule r; nil when the rule matches nothing.
func (t *ruleTranslator) policy(r *securityv1beta1.Rule) *rbacv3.Policy {
	var sources []*rbacv3.Principal
	for i, f := range r.GetFrom() {
		sources = append(sources, t.source(f.GetSource(), t.field+".from["+strconv.Itoa(i)+"].source"))
	}
	var ops []*rbacv3.Permission
	for i, to := range r.GetTo() {
		ops = append(ops, t.operation(to.GetOperation(), t.field+".to["+strconv.Itoa(i)+"].operation"))
	}
	var condIDs []*rbacv3.Principal
	var condPerms []*rbacv3.Permission
	for i, w := range r.GetWhen() {
		id, perm := t.condition(w, t.field+".when["+strconv.Itoa(i)+"]")
		if id != nil {
			condIDs = append(condIDs, id)
		}
		if perm != nil {
			condPerms = append(condPerms, perm)
		}
	}
	if t.dropped {
		return nil
	}
	ids := condIDs
	if len(sources) > 0 {
		ids = append([]*rbacv3.Principal{orIDs(sources)}, condIDs...)
	}
	perms := condPerms
	if len(ops) > 0 {
		perms = append([]*rbacv3.Permission{orPerms(ops)}, condPerms...)
	}
	return &rbacv3.Policy{Permissions: []*rbacv3.Permission{andPerms(perms)}, Principals: []*rbacv3.Principal{andIDs(ids)}}
}

// source translates one from[].source: its fields ANDed, each field's
// values ORed, not- fields negated.
func (t *ruleTranslator) source(s *securityv1beta1.Source, field string) *rbacv3.Principal {
	var ids []*rbacv3.Principal
	add := func(name string, values []string, not bool, one func(string) (*rbacv3.Principal, error)) {
		if len(values) == 0 {
			return
		}
		var alts []*rbacv3.Principal
		for i, v := range values {
			id, err := one(v)
			if err != nil {
				t.unsupported(field+"."+name+"["+strconv.Itoa(i)+"]", "%v", err)
				return
			}
			alts = append(alts, id)
		}
		id := orIDs(alts)
		if not {
			id = &rbacv3.Principal{Identifier: &rbacv3.Principal_NotId{NotId: id}}
		}
		ids = append(ids, id)
	}
	add("principals", s.GetPrincipals(), false, t.principal)
	add("notPrincipals", s.GetNotPrincipals(), true, t.principal)
	add("namespaces", s.GetNamespaces(), false, namespacePrincipal)
	add("notNamespaces", s.GetNotNamespaces(), true, namespacePrincipal)
	add("serviceAccounts", s.GetServiceAccounts(), false, t.serviceAccount)
	add("notServiceAccounts", s.GetNotServiceAccounts(), true, t.serviceAccount)
	add("ipBlocks", s.GetIpBlocks(), false, directRemoteIP)
	add("notIpBlocks", s.GetNotIpBlocks(), true, directRemoteIP)
	add("remoteIpBlocks", s.GetRemoteIpBlocks(), false, remoteIP)
	add("notRemoteIpBlocks", s.GetNotRemoteIpBlocks(), true, remoteIP)
	if len(s.GetTrustDomains()) > 0 || len(s.GetNotTrustDomains()) > 0 {
		t.unsupported(field+".trustDomains", "trustDomains is not supported yet")
	}
	if len(s.GetRequestPrincipals()) > 0 || len(s.GetNotRequestPrincipals()) > 0 {
		if !t.httpOnly() {
			add("requestPrincipals", s.GetRequestPrincipals(), false, requestPrincipal)
			add("notRequestPrincipals", s.GetNotRequestPrincipals(), true, requestPrincipal)
		}
	}
	return andIDs(ids)
}

// operation translates one to[].operation.
func (t *ruleTranslator) operation(o *securityv1beta1.Operation, field string) *rbacv3.Permission {
	var perms []*rbacv3.Permission
	add := func(name string, values []string, not, httpOnly bool, one func(string) (*rbacv3.Permission, error)) {
		if len(values) == 0 || (httpOnly && t.httpOnly()) {
			return
		}
		var alts []*rbacv3.Permission
		for i, v := range values {
			p, err := one(v)
			if err != nil {
				t.unsupported(field+"."+name+"["+strconv.Itoa(i)+"]", "%v", err)
				return
			}
			alts = append(alts, p)
		}
		p := orPerms(alts)
		if not {
			p = &rbacv3.Permission{Rule: &rbacv3.Permission_NotRule{NotRule: p}}
		}
		perms = append(perms, p)
	}
	add("hosts", o.GetHosts(), false, true, hostPermission)
	add("notHosts", o.GetNotHosts(), true, true, hostPermission)
	add("ports", o.GetPorts(), false, false, portPermission)
	add("notPorts", o.GetNotPorts(), true, false, portPermission)
	add("methods", o.GetMethods(), false, true, methodPermission)
	add("notMethods", o.GetNotMethods(), true, true, methodPermission)
	add("paths", o.GetPaths(), false, true, pathPermission)
	add("notPaths", o.GetNotPaths(), true, true, pathPermission)
	return andPerms(perms)
}

// condition translates one when[] condition into a principal or a
// permission (values ORed; notValues negated; both ANDed).
func (t *ruleTranslator) condition(c *securityv1beta1.Condition, field string) (*rbacv3.Principal, *rbacv3.Permission) {
	key := c.GetKey()
	var idOf func(string) (*rbacv3.Principal, error)
	var permOf func(string) (*rbacv3.Permission, error)
	httpOnly := false
	switch {
	case key == "source.ip":
		idOf = directRemoteIP
	case key == "remote.ip":
		idOf = remoteIP
	case key == "source.namespace":
		idOf = namespacePrincipal
	case key == "source.principal":
		idOf = t.principal
	case key == "request.auth.principal":
		idOf, httpOnly = requestPrincipal, true
	case key == "request.auth.audiences":
		idOf, httpOnly = claimPrincipal([]string{"aud"}), true
	case key == "request.auth.presenter":
		idOf, httpOnly = claimPrincipal([]string{"azp"}), true
	case strings.HasPrefix(key, "request.auth.claims["):
		path, err := claimPath(key)
		if err != nil {
			t.unsupported(field+".key", "%v", err)
			return nil, nil
		}
		idOf, httpOnly = claimPrincipal(path), true
	case key == "destination.ip":
		permOf = destinationIP
	case key == "destination.port":
		permOf = portPermission
	case key == "connection.sni":
		permOf = sniPermission
	case strings.HasPrefix(key, "request.headers[") && strings.HasSuffix(key, "]") && len(key) > len("request.headers[]"):
		name := strings.ToLower(key[len("request.headers[") : len(key)-1])
		if t.grpc && (name == ":scheme" || strings.HasPrefix(name, "grpc-")) {
			t.unsupported(field+".key", "gRPC servers cannot match header %q (gRFC A41)", name)
			return nil, nil
		}
		permOf, httpOnly = headerPermission(name), true
	default:
		t.unsupported(field+".key", "condition key %q is not supported", key)
		return nil, nil
	}
	if httpOnly && t.httpOnly() {
		return nil, nil
	}
	if len(c.GetValues()) == 0 && len(c.GetNotValues()) == 0 {
		t.unsupported(field, "a condition needs values or notValues")
		return nil, nil
	}
	if idOf != nil {
		var parts []*rbacv3.Principal
		for _, list := range []struct {
			name   string
			values []string
			not    bool
		}{{"values", c.GetValues(), false}, {"notValues", c.GetNotValues(), true}} {
			if len(list.values) == 0 {
				continue
			}
			var alts []*rbacv3.Principal
			for i, v := range list.values {
				id, err := idOf(v)
				if err != nil {
					t.unsupported(field+"."+list.name+"["+strconv.Itoa(i)+"]", "%v", err)
					return nil, nil
				}
				alts = append(alts, id)
			}
			id := orIDs(alts)
			if list.not {
				id = &rbacv3.Principal{Identifier: &rbacv3.Principal_NotId{NotId: id}}
			}
			parts = append(parts, id)
		}
		return andIDs(parts), nil
	}
	var parts []*rbacv3.Permission
	for _, list := range []struct {
		name   string
		values []string
		not    bool
	}{{"values", c.GetValues(), false}, {"notValues", c.GetNotValues(), true}} {
		if len(list.values) == 0 {
			continue
		}
		var alts []*rbacv3.Permission
		for i, v := range list.values {
			p, err := permOf(v)
			if err != nil {
				t.unsupported(field+"."+list.name+"["+strconv.Itoa(i)+"]", "%v", err)
				return nil, nil
			}
			alts = append(alts, p)
		}
		p := orPerms(alts)
		if list.not {
			p = &rbacv3.Permission{Rule: &rbacv3.Permission_NotRule{NotRule: p}}
		}
		parts = append(parts, p)
	}
	return nil, andPerms(parts)
}

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

// spiffePrefix is how peer identities start: principals in policies are
// written without it (Istio's form: TRUST_DOMAIN/ns/NS/sa/SA).
const spiffePrefix = "spiffe://"

// principal matches the peer's identity (the URI SAN of its client
// certificate): "*" any authenticated peer, "x*" / "*x" prefix / suffix,
// else exact.
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
	return authenticated(w.stringMatcher(spiffePrefix, false)), nil
}

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

// serviceAccount matches "NAMESPACE/NAME" in the mesh's trust domain.
func (t *ruleTranslator) serviceAccount(v string) (*rbacv3.Principal, error) {
	ns, name, ok := strings.Cut(v, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") || strings.Contains(v, "*") {
		return nil, fmt.Errorf("service account %q is not of the form NAMESPACE/NAME", v)
	}
	return authenticated(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{
		Exact: spiffePrefix + t.trustDomain + "/ns/" + ns + "/sa/" + name}}), nil
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
func pathPermission(v string) (*rbacv3.Permission, error) {
	if strings.Contains(v, "{") {
		return nil, fmt.Errorf("path %q: path templates ({*}, {**}) are not supported yet", v)
	}
	w, err := parseWildcard(v)
	if err != nil {
		return nil, fmt.Errorf("path %w", err)
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_UrlPath{UrlPath: &matcherv3.PathMatcher{
		Rule: &matcherv3.PathMatcher_Path{Path: w.stringMatcher("", false)}}}}, nil
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
