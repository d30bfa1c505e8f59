package gatewayapi

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1alpha3"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func (r *route) translateHTTP(tr *translation, s *gatewayv1.HTTPRouteSpec) {
	for i, rule := range s.Rules {
		field := fmt.Sprintf("spec.rules[%d]", i)
		hr := &networking.HTTPRoute{Name: r.obj.def.Object.Key() + "." + strconv.Itoa(i)}
		ok := r.httpFilters(tr, field, rule.Filters, hr)
		var backends []backendRef
		for j, b := range rule.BackendRefs {
			br := backendRef{ref: b.BackendRef, field: fmt.Sprintf("%s.backendRefs[%d]", field, j)}
			for k, f := range b.Filters {
				ff := fmt.Sprintf("%s.filters[%d]", br.field, k)
				switch {
				case f.Type == gatewayv1.HTTPRouteFilterRequestHeaderModifier && f.RequestHeaderModifier != nil:
					br.headers = headersOf(br.headers, f.RequestHeaderModifier, true)
				case f.Type == gatewayv1.HTTPRouteFilterResponseHeaderModifier && f.ResponseHeaderModifier != nil:
					br.headers = headersOf(br.headers, f.ResponseHeaderModifier, false)
				default:
					ok = false
					r.unsupported(tr, ff, "backend filter %s is not supported", f.Type)
				}
			}
			backends = append(backends, br)
		}
		if !ok {
			continue
		}
		if hr.Redirect == nil {
			r.destinations(tr, field, backends, hr)
		}
		r.timeouts(tr, field, rule.Timeouts, rule.Retry, hr)
		if rule.SessionPersistence != nil {
			r.unsupported(tr, field+".sessionPersistence", "session persistence is not supported")
			continue
		}
		matches := rule.Matches
		if len(matches) == 0 {
			matches = []gatewayv1.HTTPRouteMatch{{}}
		}
		for j, m := range matches {
			for _, e := range r.httpMatches(tr, fmt.Sprintf("%s.matches[%d]", field, j), m, hr) {
				e.rule, e.match = i, j
				r.http = append(r.http, e)
			}
		}
	}
}

// httpMatches is one Gateway API match as Istio routes: a path prefix
// matches whole path segments, so "/foo" becomes an exact "/foo" and a
// prefix "/foo/" (as Istio does).
func (r *route) httpMatches(tr *translation, field string, m gatewayv1.HTTPRouteMatch, action *networking.HTTPRoute) []*httpEntry {
	base := &networking.HTTPMatchRequest{}
	e := &httpEntry{route: r}
	for _, h := range m.Headers {
		if base.Headers == nil {
			base.Headers = map[string]*networking.StringMatch{}
		}
		base.Headers[strings.ToLower(string(h.Name))] = stringMatch(h.Type != nil && *h.Type == gatewayv1.HeaderMatchRegularExpression, h.Value)
		e.headers++
	}
	for _, q := range m.QueryParams {
		if base.QueryParams == nil {
			base.QueryParams = map[string]*networking.StringMatch{}
		}
		base.QueryParams[string(q.Name)] = stringMatch(q.Type != nil && *q.Type == gatewayv1.QueryParamMatchRegularExpression, q.Value)
		e.queries++
	}
	if m.Method != nil {
		base.Method = &networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: string(*m.Method)}}
		e.method = true
	}
	typ, value := gatewayv1.PathMatchPathPrefix, "/"
	if m.Path != nil {
		typ, value = deref(m.Path.Type, gatewayv1.PathMatchPathPrefix), deref(m.Path.Value, "/")
	}
	mk := func(uri *networking.StringMatch, rank int, rewrite func(*networking.HTTPRoute)) *httpEntry {
		c := *e
		mr := proto.Clone(base).(*networking.HTTPMatchRequest)
		mr.Uri = uri
		c.hr = cloneHTTP(action)
		c.hr.Match = []*networking.HTTPMatchRequest{mr}
		c.pathRank, c.pathLen = rank, len(value)
		if rewrite != nil {
			rewrite(c.hr)
		}
		return &c
	}
	switch typ {
	case gatewayv1.PathMatchExact:
		return []*httpEntry{mk(&networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: value}}, 0, nil)}
	case gatewayv1.PathMatchRegularExpression:
		return []*httpEntry{mk(&networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: value}}, 1, nil)}
	case gatewayv1.PathMatchPathPrefix:
		trimmed := strings.TrimSuffix(value, "/")
		if trimmed == "" {
			return []*httpEntry{mk(&networking.StringMatch{MatchType: &networking.StringMatch_Prefix{Prefix: "/"}}, 2, nil)}
		}
		// A prefix rewrite of the segment-wise prefix keeps the slash.
		slash := func(hr *networking.HTTPRoute) {
			if hr.Rewrite != nil && hr.Rewrite.Uri != "" {
				hr.Rewrite.Uri = strings.TrimSuffix(hr.Rewrite.Uri, "/") + "/"
			}
			if hr.Redirect != nil && hr.Redirect.PrefixRewrite != "" {
				hr.Redirect.PrefixRewrite = strings.TrimSuffix(hr.Redirect.PrefixRewrite, "/") + "/"
			}
		}
		return []*httpEntry{
			mk(&networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: trimmed}}, 2, nil),
			mk(&networking.StringMatch{MatchType: &networking.StringMatch_Prefix{Prefix: trimmed + "/"}}, 2, slash),
		}
	}
	r.unsupported(tr, field+".path.type", "path match type %s is not supported", typ)
	return nil
}

func stringMatch(regex bool, v string) *networking.StringMatch {
	if regex {
		return &networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: v}}
	}
	return &networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: v}}
}

func cloneHTTP(hr *networking.HTTPRoute) *networking.HTTPRoute {
	return proto.Clone(hr).(*networking.HTTPRoute)
}

// httpFilters applies a rule's filters to hr; false when one is not
// supported (the rule is dropped and the route says so).
func (r *route) httpFilters(tr *translation, field string, filters []gatewayv1.HTTPRouteFilter, hr *networking.HTTPRoute) bool {
	ok := true
	for i, f := range filters {
		ff := fmt.Sprintf("%s.filters[%d]", field, i)
		switch {
		case f.Type == gatewayv1.HTTPRouteFilterRequestHeaderModifier && f.RequestHeaderModifier != nil:
			hr.Headers = headersOf(hr.Headers, f.RequestHeaderModifier, true)
		case f.Type == gatewayv1.HTTPRouteFilterResponseHeaderModifier && f.ResponseHeaderModifier != nil:
			hr.Headers = headersOf(hr.Headers, f.ResponseHeaderModifier, false)
		case f.Type == gatewayv1.HTTPRouteFilterRequestRedirect && f.RequestRedirect != nil:
			rd := f.RequestRedirect
			red := &networking.HTTPRedirect{Scheme: deref(rd.Scheme, ""), Authority: string(deref(rd.Hostname, "")),
				RedirectCode: uint32(deref(rd.StatusCode, 302))}
			if rd.Port != nil {
				red.RedirectPort = &networking.HTTPRedirect_Port{Port: uint32(*rd.Port)}
			} else if rd.Scheme != nil {
				red.RedirectPort = &networking.HTTPRedirect_DerivePort{DerivePort: networking.HTTPRedirect_FROM_PROTOCOL_DEFAULT}
			}
			if p := rd.Path; p != nil {
				switch p.Type {
				case gatewayv1.FullPathHTTPPathModifier:
					red.Uri = deref(p.ReplaceFullPath, "/")
				case gatewayv1.PrefixMatchHTTPPathModifier:
					red.PrefixRewrite = cmpOr(deref(p.ReplacePrefixMatch, "/"), "/")
				}
			}
			hr.Redirect = red
		case f.Type == gatewayv1.HTTPRouteFilterURLRewrite && f.URLRewrite != nil:
			rw := &networking.HTTPRewrite{Authority: string(deref(f.URLRewrite.Hostname, ""))}
			if p := f.URLRewrite.Path; p != nil {
				switch p.Type {
				case gatewayv1.FullPathHTTPPathModifier:
					rw.UriRegexRewrite = &networking.RegexRewrite{Match: "/.*", Rewrite: deref(p.ReplaceFullPath, "/")}
				case gatewayv1.PrefixMatchHTTPPathModifier:
					rw.Uri = cmpOr(deref(p.ReplacePrefixMatch, "/"), "/")
				}
			}
			hr.Rewrite = rw
		case f.Type == gatewayv1.HTTPRouteFilterRequestMirror && f.RequestMirror != nil:
			if m, ok2 := r.mirror(tr, ff+".requestMirror", f.RequestMirror); ok2 {
				hr.Mirrors = append(hr.Mirrors, m)
			} else {
				ok = false
			}
		default:
			ok = false
			r.unsupported(tr, ff, "filter %s is not supported", f.Type)
		}
	}
	return ok
}

func headersOf(h *networking.Headers, f *gatewayv1.HTTPHeaderFilter, request bool) *networking.Headers {
	if h == nil {
		h = &networking.Headers{}
	}
	ops := &networking.Headers_HeaderOperations{}
	for _, s := range f.Set {
		if ops.Set == nil {
			ops.Set = map[string]string{}
		}
		ops.Set[strings.ToLower(string(s.Name))] = s.Value
	}
	for _, s := range f.Add {
		if ops.Add == nil {
			ops.Add = map[string]string{}
		}
		ops.Add[strings.ToLower(string(s.Name))] = s.Value
	}
	ops.Remove = append(ops.Remove, f.Remove...)
	if request {
		h.Request = ops
	} else {
		h.Response = ops
	}
	return h
}

func (r *route) mirror(tr *translation, field string, m *gatewayv1.HTTPRequestMirrorFilter) (*networking.HTTPMirrorPolicy, bool) {
	d, ok := r.backend(tr, field+".backendRef", m.BackendRef)
	if !ok {
		return nil, false
	}
	mp := &networking.HTTPMirrorPolicy{Destination: d}
	switch {
	case m.Percent != nil:
		mp.Percentage = &networking.Percent{Value: float64(*m.Percent)}
	case m.Fraction != nil:
		mp.Percentage = &networking.Percent{Value: 100 * float64(m.Fraction.Numerator) / float64(deref(m.Fraction.Denominator, 100))}
	}
	return mp, true
}

// unsupported records a rule dropped for a field nave does not apply.
func (r *route) unsupported(tr *translation, field, format string, args ...any) {
	msg := field + ": " + fmt.Sprintf(format, args...)
	r.invalid = append(r.invalid, msg)
	r.problem(field, format+"; the rule is not applied", args...)
}

// backendRef is one weighted backend of a rule.
type backendRef struct {
	ref     gatewayv1.BackendRef
	field   string
	headers *networking.Headers
}

// backend resolves a reference to a Service of the mesh; on failure the
// route's ResolvedRefs says why.
func (r *route) backend(tr *translation, field string, ref gatewayv1.BackendObjectReference) (*networking.Destination, bool) {
	ns := r.obj.def.Object.Namespace
	group, kind := string(deref(ref.Group, "")), string(deref(ref.Kind, kindService))
	bns := string(deref(ref.Namespace, gatewayv1.Namespace(ns)))
	fail := func(reason, msg string) (*networking.Destination, bool) {
		if r.resolved.Status == "True" {
			r.resolved = condition("ResolvedRefs", false, reason, msg)
		}
		r.problem(field, "%s", msg)
		return nil, false
	}
	if group != "" || kind != kindService {
		return fail("InvalidKind", fmt.Sprintf("backend %s/%s %s: only Services are supported", group, kind, ref.Name))
	}
	if bns != ns && !tr.granted(groupGateway, r.kind, ns, "", kindService, bns, string(ref.Name)) {
		return fail("RefNotPermitted", fmt.Sprintf("Service %s/%s is in another namespace and no ReferenceGrant there allows it", bns, ref.Name))
	}
	host := string(ref.Name) + "." + bns + ".svc." + tr.in.DomainSuffix(r.obj.def.Cluster)
	svc, ok := r.service(tr, host)
	if !ok {
		return fail("BackendNotFound", fmt.Sprintf("Service %s/%s is not in the mesh", bns, ref.Name))
	}
	if ref.Port == nil {
		return fail("BackendNotFound", fmt.Sprintf("Service %s/%s: a port is required", bns, ref.Name))
	}
	port := uint32(*ref.Port)
	found := false
	for _, p := range svc.Ports {
		found = found || p.Number == port
	}
	if !found {
		return fail("BackendNotFound", fmt.Sprintf("Service %s/%s has no port %d", bns, ref.Name, port))
	}
	return &networking.Destination{Host: host, Port: &networking.PortSelector{Number: port}}, true
}

// destinations sets hr's weighted destinations; a rule without a usable
// backend answers 500, as the Gateway API requires.
func (r *route) destinations(tr *translation, field string, backends []backendRef, hr *networking.HTTPRoute) {
	for _, b := range backends {
		d, ok := r.backend(tr, b.field, b.ref.BackendObjectReference)
		w := deref(b.ref.Weight, 1)
		if !ok || w == 0 {
			continue
		}
		hr.Route = append(hr.Route, &networking.HTTPRouteDestination{Destination: d, Weight: w, Headers: b.headers})
	}
	if len(hr.Route) == 0 {
		hr.DirectResponse = &networking.HTTPDirectResponse{Status: 500}
	}
}

func (r *route) timeouts(tr *translation, field string, t *gatewayv1.HTTPRouteTimeouts, retry *gatewayv1.HTTPRouteRetry, hr *networking.HTTPRoute) {
	if t != nil {
		if t.Request != nil {
			if d, err := time.ParseDuration(string(*t.Request)); err == nil {
				hr.Timeout = durationpb.New(d)
			} else {
				r.problem(field+".timeouts.request", "not a duration: %v; ignored", err)
			}
		}
		if t.BackendRequest != nil {
			d, err := time.ParseDuration(string(*t.BackendRequest))
			switch {
			case err != nil:
				r.problem(field+".timeouts.backendRequest", "not a duration: %v; ignored", err)
			case retry != nil:
				hr.Retries = &networking.HTTPRetry{PerTryTimeout: durationpb.New(d)}
			case hr.Timeout == nil:
				hr.Timeout = durationpb.New(d)
			}
		}
	}
	if retry != nil {
		if hr.Retries == nil {
			hr.Retries = &networking.HTTPRetry{}
		}
		hr.Retries.Attempts = int32(deref(retry.Attempts, 1))
		var on []string
		for _, c := range retry.Codes {
			on = append(on, strconv.Itoa(int(c)))
		}
		if len(on) > 0 {
			hr.Retries.RetryOn = "retriable-status-codes," + strings.Join(on, ",")
		}
		if retry.Backoff != nil {
			if d, err := time.ParseDuration(string(*retry.Backoff)); err == nil {
				hr.Retries.Backoff = durationpb.New(d)
			}
		}
	}
}

func (r *route) translateGRPC(tr *translation, s *gatewayv1.GRPCRouteSpec) {
	for i, rule := range s.Rules {
		field := fmt.Sprintf("spec.rules[%d]", i)
		hr := &networking.HTTPRoute{Name: r.obj.def.Object.Key() + "." + strconv.Itoa(i)}
		ok := true
		for k, f := range rule.Filters {
			ff := fmt.Sprintf("%s.filters[%d]", field, k)
			switch {
			case f.Type == gatewayv1.GRPCRouteFilterRequestHeaderModifier && f.RequestHeaderModifier != nil:
				hr.Headers = headersOf(hr.Headers, f.RequestHeaderModifier, true)
			case f.Type == gatewayv1.GRPCRouteFilterResponseHeaderModifier && f.ResponseHeaderModifier != nil:
				hr.Headers = headersOf(hr.Headers, f.ResponseHeaderModifier, false)
			case f.Type == gatewayv1.GRPCRouteFilterRequestMirror && f.RequestMirror != nil:
				m, ok2 := r.mirror(tr, ff+".requestMirror", f.RequestMirror)
				ok = ok && ok2
				if ok2 {
					hr.Mirrors = append(hr.Mirrors, m)
				}
			default:
				ok = false
				r.unsupported(tr, ff, "filter %s is not supported", f.Type)
			}
		}
		var backends []backendRef
		for j, b := range rule.BackendRefs {
			br := backendRef{ref: b.BackendRef, field: fmt.Sprintf("%s.backendRefs[%d]", field, j)}
			for k, f := range b.Filters {
				switch {
				case f.Type == gatewayv1.GRPCRouteFilterRequestHeaderModifier && f.RequestHeaderModifier != nil:
					br.headers = headersOf(br.headers, f.RequestHeaderModifier, true)
				case f.Type == gatewayv1.GRPCRouteFilterResponseHeaderModifier && f.ResponseHeaderModifier != nil:
					br.headers = headersOf(br.headers, f.ResponseHeaderModifier, false)
				default:
					ok = false
					r.unsupported(tr, fmt.Sprintf("%s.filters[%d]", br.field, k), "backend filter %s is not supported", f.Type)
				}
			}
			backends = append(backends, br)
		}
		if rule.SessionPersistence != nil {
			r.unsupported(tr, field+".sessionPersistence", "session persistence is not supported")
			ok = false
		}
		if !ok {
			continue
		}
		r.destinations(tr, field, backends, hr)
		matches := rule.Matches
		if len(matches) == 0 {
			matches = []gatewayv1.GRPCRouteMatch{{}}
		}
		for j, m := range matches {
			e := &httpEntry{route: r, rule: i, match: j, hr: cloneHTTP(hr)}
			mr := &networking.HTTPMatchRequest{}
			for _, h := range m.Headers {
				if mr.Headers == nil {
					mr.Headers = map[string]*networking.StringMatch{}
				}
				mr.Headers[strings.ToLower(string(h.Name))] = stringMatch(h.Type != nil && *h.Type == gatewayv1.GRPCHeaderMatchRegularExpression, h.Value)
				e.headers++
			}
			mr.Uri, e.pathRank, e.pathLen = grpcPath(m.Method)
			e.hr.Match = []*networking.HTTPMatchRequest{mr}
			r.http = append(r.http, e)
		}
	}
}

// grpcPath is the :path match of a GRPCRoute method match and its
// precedence (rank as for HTTP paths, and length).
func grpcPath(m *gatewayv1.GRPCMethodMatch) (*networking.StringMatch, int, int) {
	if m == nil || (m.Service == nil && m.Method == nil) {
		return &networking.StringMatch{MatchType: &networking.StringMatch_Prefix{Prefix: "/"}}, 2, 1
	}
	svc, method := deref(m.Service, ""), deref(m.Method, "")
	if deref(m.Type, gatewayv1.GRPCMethodMatchExact) == gatewayv1.GRPCMethodMatchRegularExpression {
		re := "/" + cmpOr(svc, "[^/]+") + "/" + cmpOr(method, "[^/]+")
		return &networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: re}}, 1, len(svc) + len(method)
	}
	switch {
	case svc != "" && method != "":
		p := "/" + svc + "/" + method
		return &networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: p}}, 0, len(p)
	case svc != "":
		return &networking.StringMatch{MatchType: &networking.StringMatch_Prefix{Prefix: "/" + svc + "/"}}, 2, len(svc) + 2
	default:
		return &networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: "/[^/]+/" + regexpQuote(method)}}, 1, len(method)
	}
}

func regexpQuote(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`\.+*?()|[]{}^$`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// l4Backends resolves a TCPRoute's or TLSRoute's backends.
func (r *route) l4Backends(tr *translation, field string, refs []gatewayv1.BackendRef) []*networking.RouteDestination {
	var out []*networking.RouteDestination
	for j, b := range refs {
		d, ok := r.backend(tr, fmt.Sprintf("%s.backendRefs[%d]", field, j), b.BackendObjectReference)
		if w := deref(b.Weight, 1); ok && w > 0 {
			out = append(out, &networking.RouteDestination{Destination: d, Weight: w})
		}
	}
	return out
}
