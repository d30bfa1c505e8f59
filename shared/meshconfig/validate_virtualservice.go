package meshconfig

import (
	"regexp"
	"slices"
	"strings"
	"time"

	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
)

// minDuration is the shortest timeout Istio accepts.
const minDuration = time.Millisecond

const meshGateway = "mesh"

func validateVirtualService(c *checker, p path, vs *networkingv1alpha3.VirtualService) {
	hosts := p.field("hosts")
	// Without hosts a VirtualService is a delegate: other VirtualServices
	// include it, and it is never bound to gateways itself (as in Istio).
	if len(vs.GetHosts()) == 0 && len(vs.GetGateways()) > 0 {
		c.fail(p.field("gateways"), "a delegate VirtualService (one without hosts) cannot name gateways")
	}
	// "*" alone matches every host; Istio allows it only on gateways.
	gatewayOnly := len(vs.GetGateways()) > 0 && !slices.Contains(vs.GetGateways(), meshGateway)
	for i, h := range vs.GetHosts() {
		if h == "*" && !gatewayOnly {
			c.fail(hosts.index(i), `the wildcard host "*" is only allowed when the virtual service is bound to gateways only (not "mesh")`)
			continue
		}
		if reason := checkHost(h, hostRules{star: true}); reason != "" {
			c.fail(hosts.index(i), "%s", reason)
		}
	}
	if len(vs.GetHttp())+len(vs.GetTcp())+len(vs.GetTls()) == 0 {
		c.fail(p, "at least one of http, tcp or tls routes is required")
	}
	for i, r := range vs.GetHttp() {
		validateHTTPRoute(c, p.field("http").index(i), r)
	}
	for i, r := range vs.GetTls() {
		rp := p.field("tls").index(i)
		if len(r.GetMatch()) == 0 {
			c.fail(rp.field("match"), "a TLS route needs at least one match")
		}
		for j, m := range r.GetMatch() {
			if len(m.GetSniHosts()) == 0 {
				c.fail(rp.field("match").index(j).field("sniHosts"), "at least one SNI host is required")
			}
			for k, h := range m.GetSniHosts() {
				if reason := checkHost(h, hostRules{star: true}); reason != "" {
					c.fail(rp.field("match").index(j).field("sniHosts").index(k), "%s", reason)
				}
			}
		}
		validateL4Destinations(c, rp.field("route"), r.GetRoute())
	}
	for i, r := range vs.GetTcp() {
		validateL4Destinations(c, p.field("tcp").index(i).field("route"), r.GetRoute())
	}
}

func validateHTTPRoute(c *checker, p path, r *networkingv1alpha3.HTTPRoute) {
	var actions []string
	if len(r.GetRoute()) > 0 {
		actions = append(actions, "route")
	}
	if r.GetRedirect() != nil {
		actions = append(actions, "redirect")
	}
	if r.GetDirectResponse() != nil {
		actions = append(actions, "directResponse")
	}
	if r.GetDelegate() != nil {
		actions = append(actions, "delegate")
	}
	switch len(actions) {
	case 0:
		c.fail(p, "one of route, redirect, directResponse or delegate is required")
	case 1:
	default:
		c.fail(p, "%s cannot be used together", strings.Join(actions, " and "))
	}

	for i, m := range r.GetMatch() {
		validateHTTPMatch(c, p.field("match").index(i), m)
	}

	route := p.field("route")
	weights := make([]int32, len(r.GetRoute()))
	for i, d := range r.GetRoute() {
		dp := route.index(i)
		validateDestination(c, dp.field("destination"), d.GetDestination())
		weights[i] = d.GetWeight()
	}
	checkWeights(c, route, weights)

	if rd := r.GetRedirect(); rd != nil {
		if code := rd.GetRedirectCode(); code != 0 && (code < 300 || code > 399) {
			c.fail(p.field("redirect").field("redirectCode"), "redirect code %d is not a 3xx status", code)
		}
	}
	if dr := r.GetDirectResponse(); dr != nil {
		if s := dr.GetStatus(); s < 200 || s > 599 {
			c.fail(p.field("directResponse").field("status"), "status %d is out of range 200-599", s)
		}
	}
	if d := r.GetDelegate(); d != nil {
		if reason := dns1123Subdomain(d.GetName()); reason != "" {
			c.fail(p.field("delegate").field("name"), "delegate name %s", reason)
		}
		if ns := d.GetNamespace(); ns != "" {
			if reason := dns1123Label(ns); reason != "" {
				c.fail(p.field("delegate").field("namespace"), "delegate namespace %s", reason)
			}
		}
	}
	if rw := r.GetRewrite().GetUriRegexRewrite(); rw != nil {
		checkRegex(c, p.field("rewrite").field("uriRegexRewrite").field("match"), rw.GetMatch())
	}

	checkDuration(c, p.field("timeout"), r.GetTimeout())
	if rt := r.GetRetries(); rt != nil {
		if rt.GetAttempts() < 0 {
			c.fail(p.field("retries").field("attempts"), "attempts %d must not be negative", rt.GetAttempts())
		}
		checkDuration(c, p.field("retries").field("perTryTimeout"), rt.GetPerTryTimeout())
		checkDuration(c, p.field("retries").field("backoff"), rt.GetBackoff())
	}
	if f := r.GetFault(); f != nil {
		fp := p.field("fault")
		if d := f.GetDelay(); d != nil {
			//lint:ignore SA1019 Istio still accepts the deprecated integer percent
			legacy := d.GetPercent()
			if legacy < 0 || legacy > 100 {
				c.fail(fp.field("delay").field("percent"), "percent %d is out of range 0-100", legacy)
			}
			if d.GetPercentage() != nil {
				checkPercent(c, fp.field("delay").field("percentage").field("value"), d.GetPercentage().GetValue())
			}
			if d.GetFixedDelay() == nil {
				c.fail(fp.field("delay").field("fixedDelay"), "fixedDelay is required")
			}
			checkDuration(c, fp.field("delay").field("fixedDelay"), d.GetFixedDelay())
		}
		if a := f.GetAbort(); a != nil {
			if a.GetPercentage() != nil {
				checkPercent(c, fp.field("abort").field("percentage").field("value"), a.GetPercentage().GetValue())
			}
			if _, ok := a.GetErrorType().(*networkingv1alpha3.HTTPFaultInjection_Abort_HttpStatus); ok {
				if s := a.GetHttpStatus(); s < 200 || s > 599 {
					c.fail(fp.field("abort").field("httpStatus"), "status %d is out of range 200-599", s)
				}
			}
		}
	}
	if r.GetMirror() != nil {
		validateDestination(c, p.field("mirror"), r.GetMirror())
	}
	if r.GetMirrorPercentage() != nil {
		checkPercent(c, p.field("mirrorPercentage").field("value"), r.GetMirrorPercentage().GetValue())
	}
	//lint:ignore SA1019 Istio still accepts the deprecated mirrorPercent
	mirrorPercent := r.GetMirrorPercent()
	if mp := mirrorPercent; mp != nil && mp.GetValue() > 100 {
		c.fail(p.field("mirrorPercent"), "percent %d is out of range 0-100", mp.GetValue())
	}
	for i, m := range r.GetMirrors() {
		mp := p.field("mirrors").index(i)
		validateDestination(c, mp.field("destination"), m.GetDestination())
		if m.GetPercentage() != nil {
			checkPercent(c, mp.field("percentage").field("value"), m.GetPercentage().GetValue())
		}
	}
	for i, o := range r.GetCorsPolicy().GetAllowOrigins() {
		checkStringMatch(c, p.field("corsPolicy").field("allowOrigins").index(i), o, matchRules{})
	}
}

func validateHTTPMatch(c *checker, p path, m *networkingv1alpha3.HTTPMatchRequest) {
	if m.GetUri() != nil {
		checkStringMatch(c, p.field("uri"), m.GetUri(), matchRules{})
	}
	if m.GetScheme() != nil {
		checkStringMatch(c, p.field("scheme"), m.GetScheme(), matchRules{})
	}
	if m.GetMethod() != nil {
		checkStringMatch(c, p.field("method"), m.GetMethod(), matchRules{})
	}
	if m.GetAuthority() != nil {
		checkStringMatch(c, p.field("authority"), m.GetAuthority(), matchRules{})
	}
	for _, k := range sortedMapKeys(m.GetHeaders()) {
		checkHeaderName(c, p.field("headers").key(k), k)
		checkStringMatch(c, p.field("headers").key(k), m.GetHeaders()[k], matchRules{presence: true})
	}
	for _, k := range sortedMapKeys(m.GetWithoutHeaders()) {
		checkHeaderName(c, p.field("withoutHeaders").key(k), k)
		checkStringMatch(c, p.field("withoutHeaders").key(k), m.GetWithoutHeaders()[k], matchRules{presence: true})
	}
	for _, k := range sortedMapKeys(m.GetQueryParams()) {
		if k == "" {
			c.fail(p.field("queryParams"), "query parameter name must not be empty")
		}
		checkStringMatch(c, p.field("queryParams").key(k), m.GetQueryParams()[k], matchRules{presence: true, noPrefix: true})
	}
	if m.GetPort() > 65535 {
		checkPort(c, p.field("port"), m.GetPort())
	}
}

func checkHeaderName(c *checker, p path, name string) {
	if name == "" {
		c.fail(p, "header name must not be empty")
	}
}

// matchRules says what a StringMatch may be where it is used.
type matchRules struct {
	presence bool // empty matches presence (headers, query parameters)
	noPrefix bool // prefix is not supported (query parameters)
}

// checkStringMatch checks a StringMatch: exactly one of exact, prefix and
// regex (decoding already refuses two), and a regex that compiles.
func checkStringMatch(c *checker, p path, m *networkingv1alpha3.StringMatch, rules matchRules) {
	switch t := m.GetMatchType().(type) {
	case nil:
		if !rules.presence {
			c.fail(p, "one of exact, prefix or regex is required")
		}
	case *networkingv1alpha3.StringMatch_Prefix:
		if rules.noPrefix {
			c.fail(p.field("prefix"), "prefix is not supported here; use exact or regex")
		}
	case *networkingv1alpha3.StringMatch_Regex:
		checkRegex(c, p.field("regex"), t.Regex)
	}
}

func checkRegex(c *checker, p path, re string) {
	if re == "" {
		c.fail(p, "regex must not be empty")
		return
	}
	if _, err := regexp.Compile(re); err != nil {
		c.fail(p, "invalid regex %q: %v", re, err)
	}
}

func validateDestination(c *checker, p path, d *networkingv1alpha3.Destination) {
	if d == nil {
		c.fail(p, "destination is required")
		return
	}
	if d.GetHost() == "" {
		c.fail(p.field("host"), "destination host is required")
	} else if reason := checkHost(d.GetHost(), hostRules{}); reason != "" {
		c.fail(p.field("host"), "%s", reason)
	}
	if d.GetSubset() != "" {
		if reason := dns1123Label(d.GetSubset()); reason != "" {
			c.fail(p.field("subset"), "subset name %s", reason)
		}
	}
	if d.GetPort() != nil {
		checkPort(c, p.field("port").field("number"), d.GetPort().GetNumber())
	}
}

func validateL4Destinations(c *checker, p path, routes []*networkingv1alpha3.RouteDestination) {
	if len(routes) == 0 {
		c.fail(p, "at least one route destination is required")
		return
	}
	weights := make([]int32, len(routes))
	for i, d := range routes {
		validateDestination(c, p.index(i).field("destination"), d.GetDestination())
		weights[i] = d.GetWeight()
	}
	checkWeights(c, p, weights)
}

// checkWeights checks a route's destination weights: never negative; a
// lone destination has 0 (unset) or 100; several must add up to 100. A
// weight of 0 among several is allowed (a canary at 0%), but not all 0.
func checkWeights(c *checker, p path, weights []int32) {
	var sum int64
	for i, w := range weights {
		if w < 0 {
			c.fail(p.index(i).field("weight"), "weight %d must not be negative", w)
		}
		sum += int64(w)
	}
	switch {
	case len(weights) == 1:
		if w := weights[0]; w != 0 && w != 100 {
			c.fail(p.index(0).field("weight"), "the only destination has weight %d, want 100 (or unset)", w)
		}
	case len(weights) > 1 && sum == 0:
		c.fail(p, "weights must be set when a route has %d destinations", len(weights))
	case len(weights) > 1 && sum != 100:
		c.fail(p, "weights sum to %d, want 100", sum)
	}
}
