package routes

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/mesh"
)

// route builds everything of an Envoy route but its match; ok is false
// when the route cannot be generated (reported).
func (t *Translator) route(cfg *mesh.Config, field string, hr *networking.HTTPRoute, ctx Context) (*routev3.Route, bool) {
	var r *routev3.Route
	switch {
	case hr.GetRedirect() != nil:
		r = &routev3.Route{Action: &routev3.Route_Redirect{Redirect: redirect(hr.GetRedirect())}}
	case hr.GetDirectResponse() != nil:
		r = &routev3.Route{Action: &routev3.Route_DirectResponse{DirectResponse: directResponse(hr.GetDirectResponse())}}
	default:
		fr := &forwardRoute{}
		if !t.routeAction(cfg, field, hr, fr, ctx) {
			return nil, false
		}
		fr.action.Route = &fr.routeAction
		fr.route.Action = &fr.action
		r = &fr.route
	}
	r.Name = hr.GetName()
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

// forwardRoute is a route that forwards (its action a RouteAction) in one
// allocation; cluster is the action's cluster when it has one.
type forwardRoute struct {
	route       routev3.Route
	action      routev3.Route_Route
	routeAction routev3.RouteAction
	cluster     routev3.RouteAction_Cluster
}

// routeAction translates the forwarding part of a route into
// fr.routeAction; false when the route cannot be generated (reported).
// Per-destination headers of a single destination go on fr.route.
func (t *Translator) routeAction(cfg *mesh.Config, field string, hr *networking.HTTPRoute, fr *forwardRoute, ctx Context) bool {
	dests := hr.GetRoute()
	if len(dests) == 0 {
		t.problem(cfg.Ref(), field+".route", "no destination; route skipped")
		return false
	}
	r, ra := &fr.route, &fr.routeAction
	var weighted []*routev3.WeightedCluster_ClusterWeight
	var hash []*routev3.RouteAction_HashPolicy
	hashSame := true
	for j, d := range dests {
		name, host, port, ok := t.cluster(cfg, func() string { return field + ".route[" + strconv.Itoa(j) + "].destination" }, d.GetDestination(), ctx)
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
		cw := &routev3.WeightedCluster_ClusterWeight{Name: name}
		if len(dests) > 1 { // a single destination's weight is not sent
			cw.Weight = wrapperspb.UInt32(w)
		}
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
		return false
	case 1:
		cw := weighted[0]
		fr.cluster.Cluster = cw.Name
		ra.ClusterSpecifier = &fr.cluster
		r.RequestHeadersToAdd, r.RequestHeadersToRemove = cw.RequestHeadersToAdd, cw.RequestHeadersToRemove
		r.ResponseHeadersToAdd, r.ResponseHeadersToRemove = cw.ResponseHeadersToAdd, cw.ResponseHeadersToRemove
	default:
		ra.ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: &routev3.WeightedCluster{Clusters: weighted}}
	}
	ra.HashPolicy = hash
	t.timeoutAndRetries(cfg, field, ra, hr)
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
	return true
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

// cluster names the cluster of a destination (at the field path field
// returns, only asked for a problem): ok is false, and for Envoy
// the name is BlackHoleCluster, when its host is unknown (or not
// visible), its port missing or its subset undefined (all reported).
// Proxyless keeps the name, so traffic to it fails rather than going
// elsewhere.
func (t *Translator) cluster(cfg *mesh.Config, field func() string, d *networking.Destination, ctx Context) (name, host string, port uint32, ok bool) {
	host = t.snap.ResolveHost(d.GetHost(), cfg)
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
		t.problem(cfg.Ref(), field()+".host", "host "+host+" is not visible to this proxy (exportTo or Sidecar egress)")
		ok = false
	case target == nil:
		t.problem(cfg.Ref(), field()+".host", "host "+host+" is not a service of this mesh")
		ok = false
	case !hasPort(target, port):
		t.problem(cfg.Ref(), field()+".port", fmt.Sprintf("service %s has no port %d", host, port))
		ok = false
	}
	if s := d.GetSubset(); s != "" && !t.subset(host, s) {
		t.problem(cfg.Ref(), field()+".subset", fmt.Sprintf("no DestinationRule for %s defines subset %q", host, s))
		ok = false
	}
	if !ok && t.envoy {
		return build.BlackHoleCluster, host, port, false
	}
	return build.ClusterName(host, port, d.GetSubset()), host, port, ok
}

// mirrors translates mirror (with mirrorPercentage) and mirrors; a mirror
// whose destination cannot be resolved is reported and left out.
func (t *Translator) mirrors(cfg *mesh.Config, field string, hr *networking.HTTPRoute, ctx Context) []*routev3.RouteAction_RequestMirrorPolicy {
	var out []*routev3.RouteAction_RequestMirrorPolicy
	add := func(f string, d *networking.Destination, p *networking.Percent, legacy int32) {
		name, _, _, ok := t.cluster(cfg, func() string { return f }, d, ctx)
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
	for _, k := range sortedKeys(ops.GetSet()) {
		add = append(add, &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{Key: k, Value: ops.GetSet()[k]},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		})
	}
	for _, k := range sortedKeys(ops.GetAdd()) {
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

func hasPort(s *mesh.Service, port uint32) bool {
	_, ok := s.Port(port)
	return ok
}

func redirectCode(code uint32) routev3.RedirectAction_RedirectResponseCode {
	switch code {
	case 302:
		return routev3.RedirectAction_FOUND
	case 303:
		return routev3.RedirectAction_SEE_OTHER
	case 307:
		return routev3.RedirectAction_TEMPORARY_REDIRECT
	case 308:
		return routev3.RedirectAction_PERMANENT_REDIRECT
	default:
		return routev3.RedirectAction_MOVED_PERMANENTLY
	}
}
