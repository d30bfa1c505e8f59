package policy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbacnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	securityv1beta1 "istio.io/api/security/v1beta1"

	"github.com/navemesh/nave/xds/gen/build"
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
		if ns != namespace && ns != s.RootNamespace() {
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
// the workload, even one without rules (which allows nothing). An RBAC is
// read-only once built: its configs may be rendered any number of times,
// from any goroutine.
type RBAC struct {
	Audit, Deny, Allow *rbacv3.RBAC
	// Custom holds the rules of CUSTOM policies, translated as DENY rules
	// and named ExtAuthzPolicyPrefix+"-ns[NS]-policy[NAME]-rule[I]": the
	// requests they match go to the external authorizer
	// (CustomHTTPFilters). Nil without CUSTOM policies (or for a target
	// without ext_authz, whose CUSTOM rules are in Deny).
	Custom *rbacv3.RBAC
	// Providers are the extension providers the CUSTOM policies name,
	// sorted, each once; ProviderRef is the first CUSTOM policy, for
	// reports.
	Providers   []string
	ProviderRef string
}

// RBACTarget says what RBAC is built for. It is a plain value.
type RBACTarget struct {
	// TrustDomain completes serviceAccounts into identities.
	TrustDomain string
	// TrustDomainAliases are the mesh's trust domain aliases
	// (mesh.Snapshot.TrustDomainAliases): principals and service accounts
	// of the mesh's trust domain match in them too.
	TrustDomainAliases []string
	// TCP builds for TCP connections (network RBAC) instead of HTTP.
	TCP bool
	// GRPC builds for a proxyless gRPC server (grpc-go's RBAC filter,
	// gRFC A41), which refuses a whole listener whose RBAC matches the
	// :scheme header or a grpc- header: such conditions are reported and
	// fail closed instead.
	GRPC bool
	// ExtAuthz says the proxy can call an external authorizer (Envoy's
	// ext_authz): CUSTOM policies go to RBAC.Custom. Without it they are
	// reported and fail closed: what their rules match is denied.
	ExtAuthz bool
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
// Action CUSTOM (an external authorizer, extauthz.go) fills Custom for a
// target with ExtAuthz; for any other it is reported and fails closed:
// what its rules match is denied.
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
		prefix := ""
		if action == securityv1beta1.AuthorizationPolicy_CUSTOM {
			if !target.ExtAuthz {
				why := "this proxy cannot call an external authorizer"
				if target.GRPC {
					why = "proxyless gRPC servers cannot call an external authorizer (grpc-go has no ext_authz on servers, gRFC A92)"
				}
				report(mesh.Problem{Resource: c.Ref(), Field: "spec.action",
					Reason: "action CUSTOM: " + why + "; requests its rules match are denied (fail closed)"})
				action = securityv1beta1.AuthorizationPolicy_DENY
			} else {
				prefix = ExtAuthzPolicyPrefix + "-"
				if name := ap.GetProvider().GetName(); !slices.Contains(out.Providers, name) {
					out.Providers = append(out.Providers, name)
					slices.Sort(out.Providers)
				}
				if out.ProviderRef == "" {
					out.ProviderRef = c.Ref()
				}
			}
		}
		if action == securityv1beta1.AuthorizationPolicy_ALLOW && out.Allow == nil {
			// An ALLOW policy turns on deny-by-default even without rules.
			add(&out.Allow, rbacv3.RBAC_ALLOW, "", nil)
		}
		for i, r := range ap.GetRules() {
			t := &ruleTranslator{c: c, field: "spec.rules[" + strconv.Itoa(i) + "]", allow: action == securityv1beta1.AuthorizationPolicy_ALLOW,
				tcp: target.TCP, grpc: target.GRPC, trustDomain: target.TrustDomain, aliases: target.TrustDomainAliases, report: report}
			p := t.policy(r)
			name := prefix + "ns[" + c.Object.Namespace + "]-policy[" + c.Object.Name + "]-rule[" + strconv.Itoa(i) + "]"
			switch action {
			case securityv1beta1.AuthorizationPolicy_CUSTOM:
				add(&out.Custom, rbacv3.RBAC_DENY, name, p)
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
	aliases     []string
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
		if id, ok := anyOf(t, principals, field+"."+name, values, not, one); ok {
			ids = append(ids, id)
		}
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
	add("trustDomains", s.GetTrustDomains(), false, trustDomainPrincipal)
	add("notTrustDomains", s.GetNotTrustDomains(), true, trustDomainPrincipal)
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
		if len(values) == 0 || (httpOnly && t.httpOnly()) { // httpOnly marks the rule: ask only for fields in use
			return
		}
		if p, ok := anyOf(t, permissions, field+"."+name, values, not, one); ok {
			perms = append(perms, p)
		}
	}
	add("hosts", o.GetHosts(), false, true, hostPermission)
	add("notHosts", o.GetNotHosts(), true, true, hostPermission)
	add("ports", o.GetPorts(), false, false, portPermission)
	add("notPorts", o.GetNotPorts(), true, false, portPermission)
	add("methods", o.GetMethods(), false, true, methodPermission)
	add("notMethods", o.GetNotMethods(), true, true, methodPermission)
	add("paths", o.GetPaths(), false, true, pathPermission(t.grpc))
	add("notPaths", o.GetNotPaths(), true, true, pathPermission(t.grpc))
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
	case key == "source.trustDomain":
		idOf = trustDomainPrincipal
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
		return conditionOf(t, principals, field, c, idOf), nil
	}
	return nil, conditionOf(t, permissions, field, c, permOf)
}

// rbacAlgebra is how RBAC combines principals, or permissions: the same
// translation builds either.
type rbacAlgebra[T any] struct {
	or, and func([]T) T
	not     func(T) T
}

var (
	principals = rbacAlgebra[*rbacv3.Principal]{or: orIDs, and: andIDs, not: func(id *rbacv3.Principal) *rbacv3.Principal {
		return &rbacv3.Principal{Identifier: &rbacv3.Principal_NotId{NotId: id}}
	}}
	permissions = rbacAlgebra[*rbacv3.Permission]{or: orPerms, and: andPerms, not: func(p *rbacv3.Permission) *rbacv3.Permission {
		return &rbacv3.Permission{Rule: &rbacv3.Permission_NotRule{NotRule: p}}
	}}
)

// anyOf translates the values of field with one and ORs them, negated if
// not. It is false when values is empty, or when one refuses a value: that
// is reported (as field[i]) and the field contributes nothing.
func anyOf[T any](t *ruleTranslator, alg rbacAlgebra[T], field string, values []string, not bool, one func(string) (T, error)) (T, bool) {
	var zero T
	if len(values) == 0 {
		return zero, false
	}
	alts := make([]T, 0, len(values))
	for i, v := range values {
		x, err := one(v)
		if err != nil {
			t.unsupported(field+"["+strconv.Itoa(i)+"]", "%v", err)
			return zero, false
		}
		alts = append(alts, x)
	}
	x := alg.or(alts)
	if not {
		x = alg.not(x)
	}
	return x, true
}

// conditionOf is a when[] condition: its values ORed, its notValues
// negated, both ANDed. A refused value drops the whole condition (zero).
func conditionOf[T any](t *ruleTranslator, alg rbacAlgebra[T], field string, c *securityv1beta1.Condition, one func(string) (T, error)) T {
	var parts []T
	for _, l := range []struct {
		name   string
		values []string
		not    bool
	}{{"values", c.GetValues(), false}, {"notValues", c.GetNotValues(), true}} {
		if len(l.values) == 0 {
			continue
		}
		x, ok := anyOf(t, alg, field+"."+l.name, l.values, l.not, one)
		if !ok {
			var zero T
			return zero
		}
		parts = append(parts, x)
	}
	return alg.and(parts)
}

// Names of the RBAC filters: each rendered filter is named after one of
// these with its action appended (".audit", ".deny", ".allow").
const (
	RBACHTTPFilter    = "envoy.filters.http.rbac"
	RBACNetworkFilter = "envoy.filters.network.rbac"
)

// HTTPFilters renders the RBAC configs as HTTP filters in order (audit,
// deny, allow; audit only withAudit), each named after the filter and its
// action so that names are unique, as grpc-go requires.
func (r RBAC) HTTPFilters(withAudit bool) []*hcmv3.HttpFilter {
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

// NetworkFilters renders the RBAC configs as network filters in order
// (audit, deny, allow), for TCP traffic (BuildRBAC with target.TCP).
func (r RBAC) NetworkFilters() []*listenerv3.Filter {
	var out []*listenerv3.Filter
	for _, rules := range []*rbacv3.RBAC{r.Audit, r.Deny, r.Allow} {
		if rules != nil {
			out = append(out, &listenerv3.Filter{Name: RBACNetworkFilter + "." + actionName(rules), ConfigType: &listenerv3.Filter_TypedConfig{
				TypedConfig: build.Any(&rbacnetv3.RBAC{Rules: rules, StatPrefix: "inbound_rbac_" + actionName(rules) + "."})}})
		}
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
