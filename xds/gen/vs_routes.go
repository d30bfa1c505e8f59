package gen

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	prevprioritiesv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/mesh"
)

// Istio's retry policy for a route whose VirtualService sets no retries:
// two attempts on connection failures, refused streams, gRPC unavailable /
// cancelled, and HTTP 503 (through retriable-status-codes).
const (
	defaultRetryOn       = "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes"
	defaultRetryAttempts = 2
)

// routeTranslator turns VirtualService HTTP routes into Envoy route.Routes.
// The proxyless gRPC generator and the Envoy generator share it; envoy
// selects Envoy's semantics where they differ (see the field comments).
//
// A routeTranslator belongs to one goroutine.
type routeTranslator struct {
	// service returns a service the proxy may route to, or nil.
	service func(host string) *mesh.Service
	// known reports whether the mesh has the host at all (to tell
	// "unknown" from "not visible" in problems).
	known func(host string) bool
	// subset reports whether host's DestinationRule defines subset.
	subset func(host, subset string) bool
	// problem records config that cannot be applied.
	problem func(resource, field, reason string)

	// envoy: Envoy semantics. Unresolvable destinations route to
	// BlackHoleCluster, Istio's default retries and timeout 0 apply,
	// sourceLabels/sourceNamespace are evaluated against the proxy,
	// delegation, CORS, mirrors and header operations are generated.
	// Otherwise (proxyless gRPC) destinations keep their names, timeouts
	// become max_stream_duration and only set retries apply.
	envoy bool
	// labels and namespace of the proxy (envoy only).
	labels    map[string]string
	namespace string
	// hashPolicy returns the consistent-hash policy of a destination
	// cluster, or nil.
	hashPolicy func(host string, port uint32, subset string) []*routev3.RouteAction_HashPolicy
	// delegate finds a delegate VirtualService (envoy only).
	delegate func(namespace, name string) *mesh.Config

	defaultRetry *routev3.RetryPolicy
	zero         *durationpb.Duration
}

// routeContext says where translated routes apply.
type routeContext struct {
	// port is the port of the route configuration: matches naming another
	// port are skipped, and it is the destination port when a destination
	// names none and its service has several.
	port uint32
	// gateway reports whether an entry of a match's gateways field (as
	// written in a VirtualService of namespace vsNamespace) names the
	// context: "mesh" for sidecars, the gateway for routers.
	gateway func(vsNamespace, name string) bool
}

func meshContext(port uint32) routeContext {
	return routeContext{port: port, gateway: func(_, name string) bool { return name == "mesh" }}
}

// virtualService translates the HTTP routes of cfg for ctx.
func (t *routeTranslator) virtualService(cfg *mesh.Config, ctx routeContext) []*routev3.Route {
	return t.httpRoutes(cfg, cfg.VirtualService().GetHttp(), nil, nil, ctx)
}

// httpRoutes translates routes of cfg. parent is set for the routes of a
// delegate: the delegating route, whose applicable matches (parentMatches)
// are ANDed with each child match, and whose settings fill the child's
// unset ones.
func (t *routeTranslator) httpRoutes(cfg *mesh.Config, hrs []*networking.HTTPRoute, parent *networking.HTTPRoute, parentMatches []*networking.HTTPMatchRequest, ctx routeContext) []*routev3.Route {
	var out []*routev3.Route
	catchAll := -1
	for i, hr := range hrs {
		field := "spec.http[" + strconv.Itoa(i) + "]"
		if catchAll >= 0 {
			t.problem(cfg.Ref(), field, field+" is unreachable: spec.http["+strconv.Itoa(catchAll)+"] matches every request")
			continue
		}
		matches, ok := t.applicable(cfg, field, hr.GetMatch(), ctx)
		if !ok {
			continue
		}
		if parent != nil {
			if matches, ok = t.mergeMatches(cfg, field, parentMatches, matches, hr.GetMatch()); !ok {
				continue
			}
			hr = inherit(hr, parent)
		}
		if hr.GetDelegate() != nil {
			out = append(out, t.delegated(cfg, field, hr, matches, parent != nil, ctx)...)
			continue
		}
		tmpl, ok := t.route(cfg, field, hr, ctx)
		if !ok {
			continue
		}
		for _, m := range matches {
			r := &routev3.Route{
				Name:                    tmpl.Name,
				Match:                   routeMatch(m),
				Action:                  tmpl.Action,
				TypedPerFilterConfig:    tmpl.TypedPerFilterConfig,
				RequestHeadersToAdd:     tmpl.RequestHeadersToAdd,
				RequestHeadersToRemove:  tmpl.RequestHeadersToRemove,
				ResponseHeadersToAdd:    tmpl.ResponseHeadersToAdd,
				ResponseHeadersToRemove: tmpl.ResponseHeadersToRemove,
			}
			out = append(out, r)
		}
		if parent == nil && matchesAll(matches) {
			catchAll = i
		}
	}
	return out
}

// applicable returns the match clauses of a route that apply in ctx: a
// route without matches matches everything (one empty clause); clauses for
// another port or gateways, or whose sourceLabels / sourceNamespace do not
// select the proxy, are dropped, as are clauses with a regex RE2 refuses
// (reported). ok is false when clauses were given and none is left.
func (t *routeTranslator) applicable(cfg *mesh.Config, field string, ms []*networking.HTTPMatchRequest, ctx routeContext) ([]*networking.HTTPMatchRequest, bool) {
	if len(ms) == 0 {
		return []*networking.HTTPMatchRequest{{}}, true
	}
	out := make([]*networking.HTTPMatchRequest, 0, len(ms))
	for k, m := range ms {
		if m.GetPort() != 0 && m.GetPort() != ctx.port {
			continue
		}
		if gws := m.GetGateways(); len(gws) > 0 {
			found := false
			for _, g := range gws {
				if ctx.gateway(cfg.Object.Namespace, g) {
					found = true
					break
				}
			}
			if !found {
				continue
			}
		}
		if t.envoy {
			if !mesh.Matches(m.GetSourceLabels(), t.labels) {
				continue
			}
			if ns := m.GetSourceNamespace(); ns != "" && ns != t.namespace {
				continue
			}
		}
		if f, err := badRegex(m); err != nil {
			t.problem(cfg.Ref(), field+".match["+strconv.Itoa(k)+"]."+f, "invalid RE2 regex: "+err.Error()+"; match skipped")
			continue
		}
		out = append(out, m)
	}
	return out, len(out) > 0
}

// regexErrors memoizes whether a regex compiles: every proxy's generation
// checks the same few regexes again. The result is a pure function of the
// string; the memo is dropped whole when it grows large, so that garbage
// input cannot grow it without bound.
var regexErrors struct {
	sync.Mutex
	m map[string]error
}

func regexError(re string) error {
	regexErrors.Lock()
	err, ok := regexErrors.m[re]
	regexErrors.Unlock()
	if ok {
		return err
	}
	_, err = regexp.Compile(re)
	regexErrors.Lock()
	if regexErrors.m == nil || len(regexErrors.m) > 10000 {
		regexErrors.m = map[string]error{}
	}
	regexErrors.m[re] = err
	regexErrors.Unlock()
	return err
}

// badRegex returns the field and error of the first regex of m that RE2
// (Go's regexp implements its syntax) does not compile.
func badRegex(m *networking.HTTPMatchRequest) (string, error) {
	check := func(f string, sm *networking.StringMatch) (string, error) {
		if r, ok := sm.GetMatchType().(*networking.StringMatch_Regex); ok {
			if err := regexError(r.Regex); err != nil {
				return f, err
			}
		}
		return "", nil
	}
	if f, err := check("uri.regex", m.GetUri()); err != nil {
		return f, err
	}
	for _, f := range []struct {
		name string
		sm   *networking.StringMatch
	}{{"scheme.regex", m.GetScheme()}, {"method.regex", m.GetMethod()}, {"authority.regex", m.GetAuthority()}} {
		if f, err := check(f.name, f.sm); err != nil {
			return f, err
		}
	}
	for _, group := range []struct {
		name string
		m    map[string]*networking.StringMatch
	}{{"headers", m.GetHeaders()}, {"withoutHeaders", m.GetWithoutHeaders()}, {"queryParams", m.GetQueryParams()}} {
		for _, k := range slices.Sorted(maps.Keys(group.m)) {
			if f, err := check(group.name+"."+k+".regex", group.m[k]); err != nil {
				return f, err
			}
		}
	}
	return "", nil
}

// matchesAll reports whether one of the (applicable) clauses matches every
// request.
func matchesAll(ms []*networking.HTTPMatchRequest) bool {
	for _, m := range ms {
		if len(m.GetHeaders())+len(m.GetWithoutHeaders())+len(m.GetQueryParams()) > 0 ||
			m.GetMethod() != nil || m.GetAuthority() != nil || m.GetScheme() != nil {
			continue
		}
		switch u := m.GetUri().GetMatchType().(type) {
		case nil:
			return true
		case *networking.StringMatch_Prefix:
			if u.Prefix == "/" || u.Prefix == "" {
				return true
			}
		case *networking.StringMatch_Regex:
			if u.Regex == ".*" {
				return true
			}
		}
	}
	return false
}

// delegated inlines the routes of the delegate VirtualService hr names.
func (t *routeTranslator) delegated(cfg *mesh.Config, field string, hr *networking.HTTPRoute, matches []*networking.HTTPMatchRequest, nested bool, ctx routeContext) []*routev3.Route {
	d := hr.GetDelegate()
	switch {
	case !t.envoy:
		t.problem(cfg.Ref(), field+".delegate", "delegate is not supported for proxyless gRPC; route skipped")
		return nil
	case nested:
		t.problem(cfg.Ref(), field+".delegate", "delegation is one level deep: a delegate VirtualService cannot delegate; route skipped")
		return nil
	}
	ns := d.GetNamespace()
	if ns == "" {
		ns = cfg.Object.Namespace
	}
	child := t.delegate(ns, d.GetName())
	if child == nil {
		t.problem(cfg.Ref(), field+".delegate", "no VirtualService "+ns+"/"+d.GetName()+"; route skipped")
		return nil
	}
	if len(child.VirtualService().GetHosts()) > 0 {
		t.problem(child.Ref(), "spec.hosts", "a delegate VirtualService (delegated to by "+cfg.Ref()+") must have no hosts; not inlined")
		return nil
	}
	return t.httpRoutes(child, child.VirtualService().GetHttp(), hr, matches, ctx)
}

// mergeMatches ANDs every parent clause with every child clause. A pair
// that cannot hold together (e.g. a child uri outside the parent's
// prefix) is dropped and reported; ok is false when nothing is left.
func (t *routeTranslator) mergeMatches(child *mesh.Config, field string, parents, children, written []*networking.HTTPMatchRequest) ([]*networking.HTTPMatchRequest, bool) {
	var out []*networking.HTTPMatchRequest
	for _, p := range parents {
		for k, c := range children {
			m, conflict := mergeMatch(p, c)
			if conflict != "" {
				f := field
				if len(written) > 0 {
					f += ".match[" + strconv.Itoa(k) + "]"
				}
				t.problem(child.Ref(), f, conflict+"; dropped")
				continue
			}
			out = append(out, m)
		}
	}
	return out, len(out) > 0
}

// mergeMatch ANDs a delegating route's match p with a delegate's match c,
// or says why they conflict.
func mergeMatch(p, c *networking.HTTPMatchRequest) (*networking.HTTPMatchRequest, string) {
	out := proto.Clone(c).(*networking.HTTPMatchRequest)
	switch {
	case p.GetUri() == nil:
	case c.GetUri() == nil:
		out.Uri = p.GetUri()
	case !uriWithin(p.GetUri(), c.GetUri()):
		return nil, "uri " + c.GetUri().String() + " is not within the delegating route's uri " + p.GetUri().String()
	}
	for _, f := range []struct {
		name string
		p, c *networking.StringMatch
		dst  **networking.StringMatch
	}{{"scheme", p.GetScheme(), c.GetScheme(), &out.Scheme}, {"method", p.GetMethod(), c.GetMethod(), &out.Method}, {"authority", p.GetAuthority(), c.GetAuthority(), &out.Authority}} {
		switch {
		case f.p == nil:
		case f.c == nil:
			*f.dst = f.p
		case !proto.Equal(f.p, f.c):
			return nil, f.name + " conflicts with the delegating route's"
		}
	}
	var conflict string
	out.Headers, conflict = mergeStringMatches("headers", p.GetHeaders(), c.GetHeaders())
	if conflict != "" {
		return nil, conflict
	}
	if out.WithoutHeaders, conflict = mergeStringMatches("withoutHeaders", p.GetWithoutHeaders(), c.GetWithoutHeaders()); conflict != "" {
		return nil, conflict
	}
	if out.QueryParams, conflict = mergeStringMatches("queryParams", p.GetQueryParams(), c.GetQueryParams()); conflict != "" {
		return nil, conflict
	}
	if p.GetPort() != 0 {
		if c.GetPort() != 0 && c.GetPort() != p.GetPort() {
			return nil, "port conflicts with the delegating route's"
		}
		out.Port = p.GetPort()
	}
	for k, v := range p.GetSourceLabels() {
		if cv, ok := c.GetSourceLabels()[k]; ok && cv != v {
			return nil, "sourceLabels." + k + " conflicts with the delegating route's"
		}
		if out.SourceLabels == nil {
			out.SourceLabels = map[string]string{}
		}
		out.SourceLabels[k] = v
	}
	out.IgnoreUriCase = p.GetIgnoreUriCase() || c.GetIgnoreUriCase()
	out.Gateways = p.GetGateways()
	return out, ""
}

func mergeStringMatches(name string, p, c map[string]*networking.StringMatch) (map[string]*networking.StringMatch, string) {
	if len(p) == 0 {
		return c, ""
	}
	out := make(map[string]*networking.StringMatch, len(p)+len(c))
	for k, v := range c {
		out[k] = v
	}
	for k, v := range p {
		if cv, ok := c[k]; ok && !proto.Equal(cv, v) {
			return nil, name + "." + k + " conflicts with the delegating route's"
		}
		out[k] = v
	}
	return out, ""
}

// uriWithin reports whether every uri matching c also matches p.
func uriWithin(p, c *networking.StringMatch) bool {
	switch pm := p.GetMatchType().(type) {
	case *networking.StringMatch_Prefix:
		switch cm := c.GetMatchType().(type) {
		case *networking.StringMatch_Prefix:
			return strings.HasPrefix(cm.Prefix, pm.Prefix)
		case *networking.StringMatch_Exact:
			return strings.HasPrefix(cm.Exact, pm.Prefix)
		}
	}
	return proto.Equal(p, c)
}

// inherit fills the settings a delegate's route leaves unset from the
// delegating route (Istio: the delegate's own settings win).
func inherit(hr, parent *networking.HTTPRoute) *networking.HTTPRoute {
	if parent.GetTimeout() == nil && parent.GetRetries() == nil && parent.GetFault() == nil && parent.GetCorsPolicy() == nil &&
		parent.GetHeaders() == nil && parent.GetRewrite() == nil && parent.GetMirror() == nil && len(parent.GetMirrors()) == 0 {
		return hr
	}
	out := proto.Clone(hr).(*networking.HTTPRoute)
	if out.Timeout == nil {
		out.Timeout = parent.GetTimeout()
	}
	if out.Retries == nil {
		out.Retries = parent.GetRetries()
	}
	if out.Fault == nil {
		out.Fault = parent.GetFault()
	}
	if out.CorsPolicy == nil {
		out.CorsPolicy = parent.GetCorsPolicy()
	}
	if out.Headers == nil {
		out.Headers = parent.GetHeaders()
	}
	if out.Rewrite == nil {
		out.Rewrite = parent.GetRewrite()
	}
	if out.Mirror == nil && len(out.Mirrors) == 0 {
		out.Mirror, out.Mirrors, out.MirrorPercentage = parent.GetMirror(), parent.GetMirrors(), parent.GetMirrorPercentage()
	}
	return out
}

// route builds everything of an Envoy route but its match; ok is false
// when the route cannot be generated (reported).
func (t *routeTranslator) route(cfg *mesh.Config, field string, hr *networking.HTTPRoute, ctx routeContext) (*routev3.Route, bool) {
	r := &routev3.Route{Name: hr.GetName()}
	switch {
	case hr.GetRedirect() != nil:
		r.Action = &routev3.Route_Redirect{Redirect: redirect(hr.GetRedirect())}
	case hr.GetDirectResponse() != nil:
		r.Action = &routev3.Route_DirectResponse{DirectResponse: directResponse(hr.GetDirectResponse())}
	default:
		ra, ok := t.routeAction(cfg, field, hr, r, ctx)
		if !ok {
			return nil, false
		}
		r.Action = &routev3.Route_Route{Route: ra}
	}
	if f := hr.GetFault(); f != nil {
		r.TypedPerFilterConfig = map[string]*anypb.Any{build.FaultFilter: build.Any(fault(f))}
	}
	if !t.envoy {
		return r, true
	}
	if c := hr.GetCorsPolicy(); c != nil {
		if r.TypedPerFilterConfig == nil {
			r.TypedPerFilterConfig = map[string]*anypb.Any{}
		}
		r.TypedPerFilterConfig[build.CorsFilter] = build.Any(corsPolicy(c))
	}
	r.RequestHeadersToAdd, r.RequestHeadersToRemove = headerOps(hr.GetHeaders().GetRequest())
	r.ResponseHeadersToAdd, r.ResponseHeadersToRemove = headerOps(hr.GetHeaders().GetResponse())
	return r, true
}

func redirect(rd *networking.HTTPRedirect) *routev3.RedirectAction {
	ra := &routev3.RedirectAction{HostRedirect: rd.GetAuthority()}
	if rd.GetUri() != "" {
		ra.PathRewriteSpecifier = &routev3.RedirectAction_PathRedirect{PathRedirect: rd.GetUri()}
	}
	if rd.GetRedirectCode() != 0 {
		ra.ResponseCode = redirectCode(rd.GetRedirectCode())
	}
	if s := rd.GetScheme(); s != "" {
		ra.SchemeRewriteSpecifier = &routev3.RedirectAction_SchemeRedirect{SchemeRedirect: s}
	}
	switch p := rd.GetRedirectPort().(type) {
	case *networking.HTTPRedirect_Port:
		ra.PortRedirect = p.Port
	case *networking.HTTPRedirect_DerivePort:
		// FROM_PROTOCOL_DEFAULT: the scheme's default port; Envoy keeps
		// the request's port when port_redirect is 0 (FROM_REQUEST_PORT).
		if p.DerivePort == networking.HTTPRedirect_FROM_PROTOCOL_DEFAULT {
			ra.PortRedirect = 80
			if rd.GetScheme() == "https" {
				ra.PortRedirect = 443
			}
		}
	}
	return ra
}

func directResponse(dr *networking.HTTPDirectResponse) *routev3.DirectResponseAction {
	a := &routev3.DirectResponseAction{Status: dr.GetStatus()}
	if b := dr.GetBody(); b != nil {
		if s := b.GetString_(); s != "" {
			a.Body = &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: s}}
		} else if by := b.GetBytes(); len(by) > 0 {
			a.Body = &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: by}}
		}
	}
	return a
}

// routeAction translates the forwarding part of a route. Per-destination
// headers of a single destination go on r.
func (t *routeTranslator) routeAction(cfg *mesh.Config, field string, hr *networking.HTTPRoute, r *routev3.Route, ctx routeContext) (*routev3.RouteAction, bool) {
	dests := hr.GetRoute()
	if len(dests) == 0 {
		t.problem(cfg.Ref(), field+".route", "no destination; route skipped")
		return nil, false
	}
	ra := &routev3.RouteAction{}
	var weighted []*routev3.WeightedCluster_ClusterWeight
	var hash []*routev3.RouteAction_HashPolicy
	hashSame := true
	for j, d := range dests {
		name, host, port, ok := t.cluster(cfg, field+".route["+strconv.Itoa(j)+"].destination", d.GetDestination(), ctx)
		w := uint32(d.GetWeight())
		if len(dests) == 1 {
			w = 100
		}
		if w == 0 {
			continue // Istio drops zero-weight destinations
		}
		if t.hashPolicy != nil && hashSame {
			var h []*routev3.RouteAction_HashPolicy
			if ok {
				h = t.hashPolicy(host, port, d.GetDestination().GetSubset())
			}
			if len(weighted) == 0 {
				hash = h
			} else if !hashEqual(hash, h) {
				hashSame, hash = false, nil
			}
		}
		cw := &routev3.WeightedCluster_ClusterWeight{Name: name, Weight: wrapperspb.UInt32(w)}
		if t.envoy {
			cw.RequestHeadersToAdd, cw.RequestHeadersToRemove = headerOps(d.GetHeaders().GetRequest())
			cw.ResponseHeadersToAdd, cw.ResponseHeadersToRemove = headerOps(d.GetHeaders().GetResponse())
		}
		if merged := mergeWeight(weighted, cw); !merged {
			weighted = append(weighted, cw)
		}
	}
	switch len(weighted) {
	case 0:
		t.problem(cfg.Ref(), field+".route", "every destination has weight 0; route skipped")
		return nil, false
	case 1:
		cw := weighted[0]
		ra.ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: cw.Name}
		r.RequestHeadersToAdd, r.RequestHeadersToRemove = cw.RequestHeadersToAdd, cw.RequestHeadersToRemove
		r.ResponseHeadersToAdd, r.ResponseHeadersToRemove = cw.ResponseHeadersToAdd, cw.ResponseHeadersToRemove
	default:
		ra.ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: &routev3.WeightedCluster{Clusters: weighted}}
	}
	ra.HashPolicy = hash
	t.timeoutAndRetries(ra, hr)
	if rw := hr.GetRewrite(); rw != nil {
		if rw.GetUri() != "" {
			ra.PrefixRewrite = rw.GetUri()
		}
		if rr := rw.GetUriRegexRewrite(); rr != nil {
			// Envoy takes only one of prefix_rewrite and regex_rewrite
			// (RouteAction.regex_rewrite).
			if rw.GetUri() != "" {
				t.problem(cfg.Ref(), field+".rewrite.uriRegexRewrite", "uri and uriRegexRewrite are exclusive; uriRegexRewrite ignored")
			} else if _, err := regexp.Compile(rr.GetMatch()); err != nil {
				t.problem(cfg.Ref(), field+".rewrite.uriRegexRewrite.match", "invalid RE2 regex: "+err.Error()+"; rewrite skipped")
			} else {
				ra.RegexRewrite = &matcherv3.RegexMatchAndSubstitute{Pattern: &matcherv3.RegexMatcher{Regex: rr.GetMatch()}, Substitution: rr.GetRewrite()}
			}
		}
		if rw.GetAuthority() != "" {
			ra.HostRewriteSpecifier = &routev3.RouteAction_HostRewriteLiteral{HostRewriteLiteral: rw.GetAuthority()}
		}
	}
	if t.envoy {
		ra.RequestMirrorPolicies = t.mirrors(cfg, field, hr, ctx)
	}
	return ra, true
}

// mergeWeight adds cw's weight to an entry of list for the same cluster
// without header operations (e.g. two unresolvable destinations both sent
// to BlackHoleCluster): Envoy's weighted clusters want distinct names.
func mergeWeight(list []*routev3.WeightedCluster_ClusterWeight, cw *routev3.WeightedCluster_ClusterWeight) bool {
	if cw.RequestHeadersToAdd != nil || cw.RequestHeadersToRemove != nil || cw.ResponseHeadersToAdd != nil || cw.ResponseHeadersToRemove != nil {
		return false
	}
	for _, e := range list {
		if e.Name == cw.Name && e.RequestHeadersToAdd == nil && e.RequestHeadersToRemove == nil && e.ResponseHeadersToAdd == nil && e.ResponseHeadersToRemove == nil {
			e.Weight = wrapperspb.UInt32(e.Weight.GetValue() + cw.Weight.GetValue())
			return true
		}
	}
	return false
}

func hashEqual(a, b []*routev3.RouteAction_HashPolicy) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func (t *routeTranslator) timeoutAndRetries(ra *routev3.RouteAction, hr *networking.HTTPRoute) {
	r := hr.GetRetries()
	if !t.envoy {
		if to := hr.GetTimeout(); to != nil {
			ra.Timeout = build.Duration(to)
			// grpc-go applies max_stream_duration, not timeout.
			ra.MaxStreamDuration = &routev3.RouteAction_MaxStreamDuration{MaxStreamDuration: build.Duration(to)}
		}
		if r.GetAttempts() > 0 {
			ra.RetryPolicy = retryPolicy(r)
		}
		return
	}
	if to := hr.GetTimeout(); to != nil {
		ra.Timeout = build.Duration(to)
	} else {
		ra.Timeout = t.noTimeout()
	}
	switch {
	case r == nil:
		ra.RetryPolicy = t.defaultRetryPolicy()
	case r.GetAttempts() > 0:
		ra.RetryPolicy = retryPolicy(r)
	}
	// attempts 0: no retries.
}

// noTimeout is a route timeout of 0, which disables Envoy's default 15 s
// (RouteAction.timeout). Istio sets it on every route whose
// VirtualService names no timeout; so do we. Shared by the routes of one
// translator.
func (t *routeTranslator) noTimeout() *durationpb.Duration {
	if t.zero == nil {
		t.zero = &durationpb.Duration{}
	}
	return t.zero
}

// defaultRetryPolicy is Istio's default when a route sets no retries: 2
// attempts on connect-failure, refused-stream, unavailable, cancelled and
// retriable-status-codes (503). Built once per translator and shared.
func (t *routeTranslator) defaultRetryPolicy() *routev3.RetryPolicy {
	if t.defaultRetry == nil {
		t.defaultRetry = &routev3.RetryPolicy{
			RetryOn:              defaultRetryOn,
			NumRetries:           wrapperspb.UInt32(defaultRetryAttempts),
			RetriableStatusCodes: []uint32{503},
		}
	}
	return t.defaultRetry
}

// retryPolicy translates retries with attempts > 0. Numeric retryOn
// entries are HTTP status codes (retriable-status-codes, Envoy
// x-envoy-retry-on).
func retryPolicy(r *networking.HTTPRetry) *routev3.RetryPolicy {
	p := &routev3.RetryPolicy{
		NumRetries:    wrapperspb.UInt32(uint32(r.GetAttempts())),
		PerTryTimeout: build.Duration(r.GetPerTryTimeout()),
	}
	retryOn := r.GetRetryOn()
	if retryOn == "" {
		retryOn = defaultRetryOn
		p.RetriableStatusCodes = []uint32{503}
	} else {
		var on []string
		hasCodes := false
		for _, s := range strings.Split(retryOn, ",") {
			s = strings.TrimSpace(s)
			if n, err := strconv.ParseUint(s, 10, 32); err == nil {
				p.RetriableStatusCodes = append(p.RetriableStatusCodes, uint32(n))
				continue
			}
			if s == "retriable-status-codes" {
				hasCodes = true
			}
			if s != "" {
				on = append(on, s)
			}
		}
		if len(p.RetriableStatusCodes) > 0 && !hasCodes {
			on = append(on, "retriable-status-codes")
		}
		retryOn = strings.Join(on, ",")
	}
	p.RetryOn = retryOn
	if r.GetRetryRemoteLocalities().GetValue() {
		// Retry in other priorities (localities) than the ones tried
		// (Envoy "previous priorities" retry priority plugin).
		p.RetryPriority = &routev3.RetryPolicy_RetryPriority{
			Name:       "envoy.retry_priorities.previous_priorities",
			ConfigType: &routev3.RetryPolicy_RetryPriority_TypedConfig{TypedConfig: build.Any(&prevprioritiesv3.PreviousPrioritiesConfig{UpdateFrequency: 2})},
		}
	}
	return p
}

// cluster names the cluster of a destination: ok is false, and for Envoy
// the name is BlackHoleCluster, when its host is unknown (or not
// visible), its port missing or its subset undefined (all reported).
// Proxyless keeps the name, so traffic to it fails rather than going
// elsewhere.
func (t *routeTranslator) cluster(cfg *mesh.Config, field string, d *networking.Destination, ctx routeContext) (name, host string, port uint32, ok bool) {
	host = mesh.ResolveHost(d.GetHost(), cfg.Object.Namespace)
	port = d.GetPort().GetNumber()
	target := t.service(host)
	if port == 0 {
		port = ctx.port
		if target != nil && len(target.Ports) == 1 {
			port = target.Ports[0].Number
		}
	}
	ok = true
	switch {
	case target == nil && t.known != nil && t.known(host):
		t.problem(cfg.Ref(), field+".host", "host "+host+" is not visible to this proxy (exportTo or Sidecar egress)")
		ok = false
	case target == nil:
		t.problem(cfg.Ref(), field+".host", "host "+host+" is not a service of this mesh")
		ok = false
	case !hasPort(target, port):
		t.problem(cfg.Ref(), field+".port", fmt.Sprintf("service %s has no port %d", host, port))
		ok = false
	}
	if s := d.GetSubset(); s != "" && !t.subset(host, s) {
		t.problem(cfg.Ref(), field+".subset", fmt.Sprintf("no DestinationRule for %s defines subset %q", host, s))
		ok = false
	}
	if !ok && t.envoy {
		return build.BlackHoleCluster, host, port, false
	}
	return build.ClusterName(host, port, d.GetSubset()), host, port, ok
}

// mirrors translates mirror (with mirrorPercentage) and mirrors; a mirror
// whose destination cannot be resolved is reported and left out.
func (t *routeTranslator) mirrors(cfg *mesh.Config, field string, hr *networking.HTTPRoute, ctx routeContext) []*routev3.RouteAction_RequestMirrorPolicy {
	var out []*routev3.RouteAction_RequestMirrorPolicy
	add := func(f string, d *networking.Destination, p *networking.Percent, legacy int32) {
		name, _, _, ok := t.cluster(cfg, f, d, ctx)
		if !ok {
			return
		}
		out = append(out, &routev3.RouteAction_RequestMirrorPolicy{
			Cluster:         name,
			RuntimeFraction: &corev3.RuntimeFractionalPercent{DefaultValue: percent(p, legacy)},
		})
	}
	if m := hr.GetMirror(); m != nil {
		//lint:ignore SA1019 Istio still honours the deprecated integer mirrorPercent when mirrorPercentage is unset
		legacy := int32(hr.GetMirrorPercent().GetValue())
		add(field+".mirror", m, hr.GetMirrorPercentage(), legacy)
	}
	for k, m := range hr.GetMirrors() {
		add(field+".mirrors["+strconv.Itoa(k)+"].destination", m.GetDestination(), m.GetPercentage(), 0)
	}
	return out
}

// headerOps translates header operations: set overwrites (or adds), add
// appends (Envoy HeaderValueOption.append_action).
func headerOps(ops *networking.Headers_HeaderOperations) ([]*corev3.HeaderValueOption, []string) {
	if ops == nil {
		return nil, nil
	}
	var add []*corev3.HeaderValueOption
	for _, k := range slices.Sorted(maps.Keys(ops.GetSet())) {
		add = append(add, &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{Key: k, Value: ops.GetSet()[k]},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		})
	}
	for _, k := range slices.Sorted(maps.Keys(ops.GetAdd())) {
		add = append(add, &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{Key: k, Value: ops.GetAdd()[k]},
			AppendAction: corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD,
		})
	}
	var remove []string
	if len(ops.GetRemove()) > 0 {
		remove = append(remove, ops.GetRemove()...)
	}
	return add, remove
}

// corsPolicy translates a CorsPolicy into the CORS filter's per-route
// config.
func corsPolicy(c *networking.CorsPolicy) *corsv3.CorsPolicy {
	out := &corsv3.CorsPolicy{
		AllowMethods:     strings.Join(c.GetAllowMethods(), ","),
		AllowHeaders:     strings.Join(c.GetAllowHeaders(), ","),
		ExposeHeaders:    strings.Join(c.GetExposeHeaders(), ","),
		AllowCredentials: c.GetAllowCredentials(),
	}
	for _, o := range c.GetAllowOrigins() {
		if sm := stringMatcher(o); sm != nil {
			out.AllowOriginStringMatch = append(out.AllowOriginStringMatch, sm)
		}
	}
	//lint:ignore SA1019 Istio still honours the deprecated exact allowOrigin list
	for _, o := range c.GetAllowOrigin() {
		out.AllowOriginStringMatch = append(out.AllowOriginStringMatch, &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: o}})
	}
	if m := c.GetMaxAge(); m != nil {
		out.MaxAge = strconv.FormatInt(int64(m.AsDuration().Seconds()), 10)
	}
	return out
}

// consistentHash translates a DestinationRule's consistentHash into route
// hash policies (Envoy RouteAction.hash_policy); nil when none applies.
func consistentHash(ch *networking.LoadBalancerSettings_ConsistentHashLB) []*routev3.RouteAction_HashPolicy {
	var p *routev3.RouteAction_HashPolicy
	switch k := ch.GetHashKey().(type) {
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName:
		p = &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_Header_{Header: &routev3.RouteAction_HashPolicy_Header{HeaderName: k.HttpHeaderName}}}
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpCookie:
		p = &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_Cookie_{Cookie: &routev3.RouteAction_HashPolicy_Cookie{
			Name: k.HttpCookie.GetName(), Path: k.HttpCookie.GetPath(), Ttl: build.Duration(k.HttpCookie.GetTtl())}}}
	case *networking.LoadBalancerSettings_ConsistentHashLB_UseSourceIp:
		if k.UseSourceIp {
			p = &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_ConnectionProperties_{ConnectionProperties: &routev3.RouteAction_HashPolicy_ConnectionProperties{SourceIp: true}}}
		}
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpQueryParameterName:
		p = &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_QueryParameter_{QueryParameter: &routev3.RouteAction_HashPolicy_QueryParameter{Name: k.HttpQueryParameterName}}}
	}
	if p == nil {
		return nil
	}
	return []*routev3.RouteAction_HashPolicy{p}
}
