package gatewayapi

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/navemesh/nave/shared/meshconfig"
)

// route is a route being translated: its parents are this
// translation's, its rules (*rules) may be an earlier one's.
type route struct {
	obj       *object
	kind      string
	common    gatewayv1.CommonRouteSpec
	hostnames []string
	parents   []*parentResult
	*rules
}

// rules are a route's rules translated, bound to parents later. They
// depend on the route object, its cluster, the ReferenceGrants and the
// services named (deps): a later translation reuses them while those
// are the same.
type rules struct {
	http []*httpEntry
	l4   []*l4Entry
	// resolved is the ResolvedRefs condition; invalid lists rules dropped.
	resolved metav1.Condition
	invalid  []string
	problems []Problem
	deps     []serviceDep
	// onPort are the HTTP entries limited to a Service port (GAMMA
	// parentRef port), made once per port.
	onPort map[uint32][]*httpEntry
}

// serviceDep is one service lookup of a route's translation and its answer.
type serviceDep struct {
	host  string
	found bool
	ports string
}

func portsKey(svc Service) string {
	var b strings.Builder
	for _, p := range svc.Ports {
		fmt.Fprintf(&b, "%d,", p.Number)
	}
	return b.String()
}

// service looks host up, recording the answer as a dependency.
func (r *route) service(tr *translation, host string) (Service, bool) {
	svc, ok := tr.in.Service(host)
	r.deps = append(r.deps, serviceDep{host: host, found: ok, ports: portsKey(svc)})
	return svc, ok
}

// problem records a problem of the route's rules.
func (r *route) problem(field, format string, args ...any) {
	r.problems = append(r.problems, Problem{Resource: r.obj.ref(), Field: field, Reason: fmt.Sprintf(format, args...)})
}

// valid reports whether every lookup rs made answers the same now.
func (rs *rules) valid(tr *translation) bool {
	for _, d := range rs.deps {
		svc, ok := tr.in.Service(d.host)
		if ok != d.found || (ok && portsKey(svc) != d.ports) {
			return false
		}
	}
	return true
}

type rulesKey struct {
	obj     *meshconfig.Object
	cluster string
}

// parentResult is the outcome of one parentRef that nave answers for.
type parentResult struct {
	ref      gatewayv1.ParentReference
	accepted metav1.Condition
}

// httpEntry is one match of one rule, as an Istio HTTP route.
type httpEntry struct {
	route *route
	rule  int
	match int
	hr    *networking.HTTPRoute
	// precedence keys (Gateway API's order).
	pathRank, pathLen, headers, queries int
	method                              bool
}

// l4Entry is one TCPRoute or TLSRoute rule.
type l4Entry struct {
	route *route
	dests []*networking.RouteDestination
}

func (tr *translation) newRoute(o *object) *route {
	r := &route{obj: o, kind: o.def.Object.Kind.Kind}
	switch s := o.spec.(type) {
	case *gatewayv1.HTTPRouteSpec:
		r.common, r.hostnames = s.CommonRouteSpec, hostnames(s.Hostnames)
	case *gatewayv1.GRPCRouteSpec:
		r.common, r.hostnames = s.CommonRouteSpec, hostnames(s.Hostnames)
	case *gatewayv1.TCPRouteSpec:
		r.common = s.CommonRouteSpec
	case *gatewayv1.TLSRouteSpec:
		r.common, r.hostnames = s.CommonRouteSpec, hostnames(s.Hostnames)
	}
	k := rulesKey{o.def.Object, o.def.Cluster}
	if rs := tr.t.rules[k]; rs != nil && rs.valid(tr) {
		r.rules = rs
	} else {
		r.rules = &rules{resolved: condition("ResolvedRefs", true, "ResolvedRefs", "")}
		switch s := o.spec.(type) {
		case *gatewayv1.HTTPRouteSpec:
			r.translateHTTP(tr, s)
		case *gatewayv1.GRPCRouteSpec:
			r.translateGRPC(tr, s)
		case *gatewayv1.TCPRouteSpec:
			for i, rule := range s.Rules {
				r.l4 = append(r.l4, &l4Entry{route: r, dests: r.l4Backends(tr, fmt.Sprintf("spec.rules[%d]", i), rule.BackendRefs)})
			}
		case *gatewayv1.TLSRouteSpec:
			for i, rule := range s.Rules {
				r.l4 = append(r.l4, &l4Entry{route: r, dests: r.l4Backends(tr, fmt.Sprintf("spec.rules[%d]", i), rule.BackendRefs)})
			}
		}
	}
	tr.nextRules[k] = r.rules
	tr.res.Problems = append(tr.res.Problems, r.problems...)
	return r
}

func hostnames(h []gatewayv1.Hostname) []string {
	out := make([]string, 0, len(h))
	for _, x := range h {
		out = append(out, strings.ToLower(string(x)))
	}
	return out
}

// attach binds the route to each parent nave answers for.
func (r *route) attach(tr *translation) {
	ns := r.obj.def.Object.Namespace
	for i, ref := range r.common.ParentRefs {
		group, kind := string(deref(ref.Group, groupGateway)), string(deref(ref.Kind, "Gateway"))
		pns := string(deref(ref.Namespace, gatewayv1.Namespace(ns)))
		field := fmt.Sprintf("spec.parentRefs[%d]", i)
		switch {
		case group == "" && kind == kindService:
			r.attachService(tr, ref, pns, field)
		case group == groupGateway && kind == "Gateway":
			gw := tr.gateways[pns+"/"+string(ref.Name)]
			if gw == nil {
				continue // another controller's Gateway, or none: not nave's to answer
			}
			r.attachGateway(tr, gw, ref, field)
		}
	}
}

func (r *route) attachService(tr *translation, ref gatewayv1.ParentReference, pns, field string) {
	pr := &parentResult{ref: ref}
	r.parents = append(r.parents, pr)
	host := string(ref.Name) + "." + pns + ".svc." + tr.in.DomainSuffix(r.obj.def.Cluster)
	svc, ok := tr.in.Service(host)
	if !ok {
		pr.accepted = condition("Accepted", false, "NoMatchingParent", "Service "+pns+"/"+string(ref.Name)+" is not in the mesh")
		tr.problem(r.obj, field, "Service %s/%s is not in the mesh; the route is not attached to it", pns, ref.Name)
		return
	}
	port := uint32(deref(ref.Port, 0))
	if port != 0 && !slices.ContainsFunc(svc.Ports, func(p Port) bool { return p.Number == port }) {
		pr.accepted = condition("Accepted", false, "NoMatchingParent", fmt.Sprintf("Service %s/%s has no port %d", pns, ref.Name, port))
		tr.problem(r.obj, field+".port", "Service %s/%s has no port %d; the route is not attached to it", pns, ref.Name, port)
		return
	}
	if ref.SectionName != nil {
		pr.accepted = condition("Accepted", false, "UnsupportedValue", "sectionName of a Service parent is not supported")
		tr.problem(r.obj, field+".sectionName", "not supported for a Service parent; the route is not attached to it")
		return
	}
	pr.accepted = condition("Accepted", true, "Accepted", "")
	consumer := r.obj.def.Object.Namespace != pns
	k := bucketKey{mesh: true, host: host, namespace: pns}
	if consumer {
		k.namespace = r.obj.def.Object.Namespace
		k.consumer = true
	}
	b := tr.bucket(tr.meshBuckets, k, r.obj.def.Cluster, svc.Namespace)
	b.add(r, port)
}

func (r *route) attachGateway(tr *translation, gw *gateway, ref gatewayv1.ParentReference, field string) {
	pr := &parentResult{ref: ref}
	r.parents = append(r.parents, pr)
	ns := r.obj.def.Object.Namespace
	matched, allowed, hosted := 0, 0, 0
	var why string
	for _, l := range gw.listeners {
		if ref.SectionName != nil && *ref.SectionName != l.l.Name {
			continue
		}
		if ref.Port != nil && *ref.Port != l.l.Port {
			continue
		}
		matched++
		if !l.accepted {
			why = "listener " + string(l.l.Name) + " is not accepted"
			continue
		}
		if !slices.ContainsFunc(l.kinds, func(k gatewayv1.RouteGroupKind) bool { return string(k.Kind) == r.kind }) {
			why = "listener " + string(l.l.Name) + " does not allow " + r.kind
			continue
		}
		if ok, reason := l.allowsNamespace(ns); !ok {
			why = reason
			continue
		}
		allowed++
		var hosts []string
		if r.kind != "TCPRoute" {
			if hosts = intersectHosts(l.hostname, r.hostnames); len(hosts) == 0 {
				continue
			}
		}
		hosted++
		l.attached++
		if r.kind == "TCPRoute" {
			hosts = []string{"*"}
		}
		if l.server == nil {
			continue // attached, but the listener is not programmed
		}
		for _, h := range hosts {
			b := tr.bucket(tr.gwBuckets, bucketKey{gateway: l.istioRef(), host: h, namespace: gw.obj.def.Object.Namespace, name: l.istioName()}, gw.obj.def.Cluster, "")
			b.gatewayPort = uint32(l.l.Port)
			b.add(r, 0)
		}
	}
	switch {
	case matched == 0:
		pr.accepted = condition("Accepted", false, "NoMatchingParent", "no listener of the Gateway matches sectionName and port")
		tr.problem(r.obj, field, "no listener of Gateway %s matches; the route is not attached to it", gw.obj.key())
	case allowed == 0:
		pr.accepted = condition("Accepted", false, "NotAllowedByListeners", why)
		tr.problem(r.obj, field, "not allowed by the listeners of Gateway %s: %s", gw.obj.key(), why)
	case hosted == 0:
		pr.accepted = condition("Accepted", false, "NoMatchingListenerHostname", "no hostname of the route matches a listener's")
		tr.problem(r.obj, "spec.hostnames", "no hostname matches a listener of Gateway %s; the route is not attached to it", gw.obj.key())
	default:
		pr.accepted = condition("Accepted", true, "Accepted", "")
	}
}

// allowsNamespace applies allowedRoutes.namespaces (default: Same).
func (l *listener) allowsNamespace(ns string) (bool, string) {
	from := gatewayv1.NamespacesFromSame
	if l.l.AllowedRoutes != nil && l.l.AllowedRoutes.Namespaces != nil && l.l.AllowedRoutes.Namespaces.From != nil {
		from = *l.l.AllowedRoutes.Namespaces.From
	}
	switch from {
	case gatewayv1.NamespacesFromAll:
		return true, ""
	case gatewayv1.NamespacesFromSame:
		if ns == l.gw.obj.def.Object.Namespace {
			return true, ""
		}
		return false, "listener " + string(l.l.Name) + " allows routes of its own namespace only"
	case gatewayv1.NamespacesFromSelector:
		// Namespace labels do not reach the hub, but every namespace
		// carries its name as kubernetes.io/metadata.name: a selector of
		// that label alone is decided by the name.
		if sel := l.l.AllowedRoutes.Namespaces.Selector; sel != nil {
			if ok, known := selectsByName(sel, ns); known {
				if ok {
					return true, ""
				}
				return false, "listener " + string(l.l.Name) + " does not select namespace " + ns
			}
		}
	}
	return false, "listener " + string(l.l.Name) + ": allowedRoutes.namespaces.from " + string(from) +
		" is supported only with a selector of kubernetes.io/metadata.name (namespace labels do not reach the hub)"
}

// nameLabel is the label every namespace carries with its name.
const nameLabel = "kubernetes.io/metadata.name"

// selectsByName evaluates a selector on nameLabel alone against
// namespace ns; known is false when it reads any other label.
func selectsByName(sel *metav1.LabelSelector, ns string) (ok, known bool) {
	ok = true
	for k, v := range sel.MatchLabels {
		if k != nameLabel {
			return false, false
		}
		ok = ok && v == ns
	}
	for _, e := range sel.MatchExpressions {
		if e.Key != nameLabel {
			return false, false
		}
		in := contains(e.Values, ns)
		switch e.Operator {
		case metav1.LabelSelectorOpIn:
			ok = ok && in
		case metav1.LabelSelectorOpNotIn:
			ok = ok && !in
		case metav1.LabelSelectorOpExists:
		case metav1.LabelSelectorOpDoesNotExist:
			ok = false
		default:
			return false, false
		}
	}
	return ok, true
}

// intersectHosts is the hostnames a route serves on a listener of
// hostname lh ("" any).
func intersectHosts(lh string, route []string) []string {
	if len(route) == 0 {
		return []string{cmpOr(lh, "*")}
	}
	var out []string
	for _, h := range route {
		if x, ok := intersect(lh, h); ok && !contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

func intersect(a, b string) (string, bool) {
	switch {
	case a == "" || a == "*":
		return b, true
	case a == b:
		return a, true
	case strings.HasPrefix(a, "*.") && strings.HasSuffix(b, a[1:]):
		return b, true
	case strings.HasPrefix(b, "*.") && strings.HasSuffix(a, b[1:]):
		return a, true
	}
	return "", false
}

// emitStatus records the route's RouteStatus.
func (r *route) emitStatus(tr *translation) {
	st := &gatewayv1.RouteStatus{Parents: []gatewayv1.RouteParentStatus{}}
	for _, p := range r.parents {
		conds := []metav1.Condition{p.accepted, r.resolved}
		if len(r.invalid) > 0 && p.accepted.Status == metav1.ConditionTrue {
			conds = append(conds, condition("PartiallyInvalid", true, "UnsupportedValue", strings.Join(r.invalid, "; ")))
		}
		st.Parents = append(st.Parents, gatewayv1.RouteParentStatus{ParentRef: p.ref, ControllerName: meshconfig.GatewayController, Conditions: conds})
	}
	if len(st.Parents) == 0 && len(r.obj.losers) == 0 {
		return // no parent of nave's
	}
	tr.status(r.obj, st, func(d Definition) any {
		lost := &gatewayv1.RouteStatus{Parents: []gatewayv1.RouteParentStatus{}}
		for _, p := range r.parents {
			lost.Parents = append(lost.Parents, gatewayv1.RouteParentStatus{ParentRef: p.ref, ControllerName: meshconfig.GatewayController,
				Conditions: []metav1.Condition{condition("Accepted", false, ReasonConflicted, conflictMessage(r.obj, d))}})
		}
		return lost
	})
}

// bucketKey names one generated VirtualService: the routes bound to one
// host of one listener (an Istio Gateway), or the mesh routes of one
// Service from one namespace (its own: producer; another: consumer).
type bucketKey struct {
	mesh      bool
	consumer  bool
	gateway   string // "namespace/name" of the Istio Gateway
	name      string // the Istio Gateway's name
	host      string
	namespace string // the VirtualService's
}

// vsMemo is what a VirtualService was made of, and the object (see
// Translator).
type vsMemo struct {
	cluster string
	source  *meshconfig.Object
	http    []*httpEntry
	l4      []*l4Entry
	obj     *meshconfig.Object
}

// madeVS is a VirtualService made in this translation.
type madeVS struct {
	key  bucketKey
	memo *vsMemo
}

type bucket struct {
	key         bucketKey
	cluster     string
	gatewayPort uint32
	http        []*httpEntry
	l4          []*l4Entry
	sources     []*route
}

func (tr *translation) bucket(m map[bucketKey]*bucket, k bucketKey, cluster, _ string) *bucket {
	b := m[k]
	if b == nil {
		b = &bucket{key: k, cluster: cluster}
		m[k] = b
	}
	return b
}

// add binds r's rules to the bucket; port, if set, limits mesh matches to
// a Service port.
func (b *bucket) add(r *route, port uint32) {
	b.sources = append(b.sources, r)
	if port == 0 {
		b.http = append(b.http, r.http...)
	} else {
		b.http = append(b.http, r.entriesOnPort(port)...)
	}
	b.l4 = append(b.l4, r.l4...)
}

// entriesOnPort are r's HTTP entries limited to port, made once.
func (r *route) entriesOnPort(port uint32) []*httpEntry {
	if list, ok := r.onPort[port]; ok {
		return list
	}
	var list []*httpEntry
	for _, e := range r.http {
		c := *e
		c.hr = cloneHTTP(e.hr)
		for _, m := range c.hr.Match {
			m.Port = port
		}
		list = append(list, &c)
	}
	if r.onPort == nil {
		r.onPort = map[uint32][]*httpEntry{}
	}
	r.onPort[port] = list
	return list
}

// emitVirtualServices makes one VirtualService per bucket, its HTTP
// routes in Gateway API precedence order.
func (tr *translation) emitVirtualServices() {
	for _, m := range []map[bucketKey]*bucket{tr.gwBuckets, tr.meshBuckets} {
		for _, b := range m {
			slices.SortStableFunc(b.http, entryOrder)
			src := b.sources[0].obj
			if prev := tr.t.buckets[b.key]; prev != nil && prev.cluster == b.cluster && prev.source == src.def.Object &&
				slices.Equal(prev.http, b.http) && slices.Equal(prev.l4, b.l4) {
				// The same entries in the same order: the same object.
				tr.nextBuckets[b.key] = prev
				tr.res.VirtualServices = append(tr.res.VirtualServices, Generated{Cluster: b.cluster, Object: prev.obj})
				continue
			}
			vs := &networking.VirtualService{Hosts: []string{b.key.host}}
			var name string
			if b.key.mesh {
				vs.Gateways = []string{"mesh"}
				svc, _, _ := strings.Cut(b.key.host, ".")
				name = svc + "-gwapi-mesh"
				if b.key.consumer {
					vs.ExportTo = []string{"."}
					name = svc + "-" + strings.Split(b.key.host, ".")[1] + "-gwapi-consumer"
				} else {
					vs.ExportTo = []string{"*"}
				}
			} else {
				vs.Gateways = []string{b.key.gateway}
				name = b.key.name + "-" + hostLabel(b.key.host)
			}
			for _, e := range b.http {
				vs.Http = append(vs.Http, e.hr)
			}
			for _, e := range b.l4 {
				if len(e.dests) == 0 {
					continue
				}
				switch e.route.kind {
				case "TCPRoute":
					tcp := &networking.TCPRoute{Route: e.dests}
					if !b.key.mesh {
						tcp.Match = []*networking.L4MatchAttributes{{Port: b.gatewayPort, Gateways: vs.Gateways}}
					}
					vs.Tcp = append(vs.Tcp, tcp)
				case "TLSRoute":
					tls := &networking.TLSRoute{Route: e.dests, Match: []*networking.TLSMatchAttributes{{SniHosts: []string{b.key.host}}}}
					if !b.key.mesh {
						tls.Match[0].Port, tls.Match[0].Gateways = b.gatewayPort, vs.Gateways
					}
					vs.Tls = append(vs.Tls, tls)
				}
			}
			if len(vs.Http) == 0 && len(vs.Tcp) == 0 && len(vs.Tls) == 0 {
				continue
			}
			g := Generated{Cluster: b.cluster, Object: tr.generated(virtualServiceKind, src, b.key.namespace, name, vs)}
			tr.res.VirtualServices = append(tr.res.VirtualServices, g)
			tr.made = append(tr.made, madeVS{key: b.key, memo: &vsMemo{cluster: b.cluster, source: src.def.Object, http: b.http, l4: b.l4, obj: g.Object}})
		}
	}
}

// hostLabel makes a host usable in an object name.
func hostLabel(h string) string {
	if h == "*" {
		return "any"
	}
	return strings.ReplaceAll(h, "*", "wildcard")
}

// entryOrder is Gateway API's precedence: exact paths, then regular
// expressions, then the longest prefix; then a method match, more header
// matches, more query parameter matches; then the oldest route, its
// namespace/name, and the rule and match order.
func entryOrder(a, b *httpEntry) int {
	if c := cmp.Or(cmp.Compare(a.pathRank, b.pathRank), cmp.Compare(b.pathLen, a.pathLen)); c != 0 {
		return c
	}
	if a.method != b.method {
		if a.method {
			return -1
		}
		return 1
	}
	if c := cmp.Or(cmp.Compare(b.headers, a.headers), cmp.Compare(b.queries, a.queries)); c != 0 {
		return c
	}
	ao, bo := a.route.obj.def.Object, b.route.obj.def.Object
	if !ao.CreationTime.Equal(bo.CreationTime) {
		switch {
		case ao.CreationTime.IsZero():
			return 1
		case bo.CreationTime.IsZero():
			return -1
		case ao.CreationTime.Before(bo.CreationTime):
			return -1
		default:
			return 1
		}
	}
	return cmp.Or(cmp.Compare(ao.Namespace, bo.Namespace), cmp.Compare(ao.Name, bo.Name), cmp.Compare(a.rule, b.rule), cmp.Compare(a.match, b.match))
}
