package envoy

import (
	"slices"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/gen/routes"
	"github.com/navemesh/nave/xds/mesh"
)

// TestSidecarVirtualServiceFeatures has one case per VirtualService
// feature; each checks the routes of reviews on 9080 (or what it names).
func TestSidecarVirtualServiceFeatures(t *testing.T) {
	cases := []struct {
		name   string
		yaml   string
		mutate func(s *mesh.Snapshot)
		check  func(t *testing.T, out *build.Output, rs []*routev3.Route)
	}{
		{
			name: "uri exact, prefix, regex and ignoreUriCase",
			yaml: vsYAML("r", `  hosts: [reviews]
  http:
  - match: [{uri: {exact: /a}}, {uri: {prefix: /b}, ignoreUriCase: true}, {uri: {regex: "/c/[0-9]+"}}]
    route: [{destination: {host: reviews}}]
`),
			check: func(t *testing.T, out *build.Output, rs []*routev3.Route) {
				wantRoutes(t, rs, 3) // one per match clause, same action
				if rs[0].GetMatch().GetPath() != "/a" || rs[1].GetMatch().GetPrefix() != "/b" || rs[1].GetMatch().GetCaseSensitive().GetValue() ||
					rs[1].GetMatch().GetCaseSensitive() == nil || rs[2].GetMatch().GetSafeRegex().GetRegex() != "/c/[0-9]+" {
					t.Errorf("matches = %v", rs)
				}
				if rs[0].GetRoute() != rs[2].GetRoute() || rs[0].GetRoute().GetCluster() != build.ClusterName(reviews, 9080, "") {
					t.Errorf("match clauses should share one action: %v", rs)
				}
			},
		},
		{
			name: "invalid regex is reported and its match skipped",
			yaml: vsYAML("r", `  hosts: [reviews]
  http:
  - match: [{uri: {regex: "/ok"}}, {uri: {prefix: /p}}]
    route: [{destination: {host: reviews}}]
`),
			mutate: func(s *mesh.Snapshot) {
				s.VirtualServices[reviews][0].VirtualService().GetHttp()[0].GetMatch()[0].Uri =
					&networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: "/a(["}}
			},
			check: func(t *testing.T, out *build.Output, rs []*routev3.Route) {
				wantRoutes(t, rs, 1)
				if rs[0].GetMatch().GetPrefix() != "/p" {
					t.Errorf("kept route = %v", rs[0])
				}
				wantProblem(t, out, "VirtualService shop/r", "spec.http[0].match[0].uri.regex", "invalid RE2 regex")
			},
		},
		{
			name: "headers, withoutHeaders, queryParams, method, authority, scheme",
			yaml: vsYAML("r", `  hosts: [reviews]
  http:
  - match:
    - headers: {X-User: {exact: jason}, x-pre: {prefix: a}, x-re: {regex: "b+"}}
      withoutHeaders: {x-debug: {exact: "1"}}
      queryParams: {q: {exact: v}, r: {regex: "x.*"}}
      method: {exact: GET}
      authority: {prefix: reviews}
      scheme: {exact: https}
    route: [{destination: {host: reviews}}]
`),
			check: func(t *testing.T, out *build.Output, rs []*routev3.Route) {
				wantRoutes(t, rs, 1)
				h := map[string]*routev3.HeaderMatcher{}
				for _, hm := range rs[0].GetMatch().GetHeaders() {
					h[hm.GetName()] = hm
				}
				if h["x-user"].GetStringMatch().GetExact() != "jason" || h["x-pre"].GetStringMatch().GetPrefix() != "a" ||
					h["x-re"].GetStringMatch().GetSafeRegex().GetRegex() != "b+" {
					t.Errorf("header matchers = %v", h)
				}
				if !h["x-debug"].GetInvertMatch() || h["x-debug"].GetStringMatch().GetExact() != "1" {
					t.Errorf("withoutHeaders = %v", h["x-debug"])
				}
				if h[":method"].GetStringMatch().GetExact() != "GET" || h[":authority"].GetStringMatch().GetPrefix() != "reviews" ||
					h[":scheme"].GetStringMatch().GetExact() != "https" {
					t.Errorf("pseudo header matchers = %v", h)
				}
				qp := rs[0].GetMatch().GetQueryParameters()
				if len(qp) != 2 || qp[0].GetName() != "q" || qp[0].GetStringMatch().GetExact() != "v" || qp[1].GetStringMatch().GetSafeRegex().GetRegex() != "x.*" {
					t.Errorf("query params = %v", qp)
				}
			},
		},
		{
			name: "port: matches for another port are skipped",
			yaml: vsYAML("r", `  hosts: [ratings]
  http:
  - match: [{port: 9090, uri: {prefix: /grpc}}]
    route: [{destination: {host: ratings, port: {number: 9090}}}]
  - match: [{port: 9080, uri: {prefix: /http}}]
    route: [{destination: {host: ratings}}]
`),
			check: func(t *testing.T, out *build.Output, _ []*routev3.Route) {
				rs := vhost(t, routeConfig(t, out, "9080"), ratings+":9080").GetRoutes()
				wantRoutes(t, rs, 1)
				if rs[0].GetMatch().GetPrefix() != "/http" || rs[0].GetRoute().GetCluster() != build.ClusterName(ratings, 9080, "") {
					t.Errorf("9080 route = %v (destination port defaults to the route config's)", rs[0])
				}
				rs = vhost(t, routeConfig(t, out, "9090"), ratings+":9090").GetRoutes()
				wantRoutes(t, rs, 1)
				if rs[0].GetMatch().GetPrefix() != "/grpc" || rs[0].GetRoute().GetCluster() != build.ClusterName(ratings, 9090, "") {
					t.Errorf("9090 route = %v", rs[0])
				}
			},
		},
		{
			name: "sourceLabels and gateways select match clauses at generation",
			yaml: vsYAML("r", `  hosts: [reviews]
  http:
  - match: [{sourceLabels: {app: productpage}, uri: {prefix: /mine}}, {sourceLabels: {app: other}, uri: {prefix: /theirs}}]
    route: [{destination: {host: reviews}}]
  - match: [{sourceLabels: {app: other}}]
    route: [{destination: {host: reviews, subset: v2}}]
  - match: [{gateways: [shop/gw], uri: {prefix: /gw}}, {gateways: [mesh], uri: {prefix: /mesh}}]
    route: [{destination: {host: reviews}}]
  - match: [{sourceNamespace: other, uri: {prefix: /other-ns}}, {sourceNamespace: shop, uri: {prefix: /shop-ns}}]
    route: [{destination: {host: reviews}}]
`),
			check: func(t *testing.T, out *build.Output, rs []*routev3.Route) {
				wantRoutes(t, rs, 3)
				if rs[0].GetMatch().GetPrefix() != "/mine" || rs[1].GetMatch().GetPrefix() != "/mesh" || rs[2].GetMatch().GetPrefix() != "/shop-ns" {
					t.Errorf("routes = %v", rs)
				}
			},
		},
		{
			name: "weighted destinations with subsets; unknown host and missing subset go to the black hole",
			yaml: vsYAML("r", `  hosts: [reviews]
  http:
  - match: [{uri: {prefix: /split}}]
    route:
    - {destination: {host: reviews, subset: v1}, weight: 60}
    - {destination: {host: reviews, subset: v2}, weight: 30}
    - {destination: {host: reviews, subset: v9}, weight: 10}
  - route:
    - {destination: {host: nowhere.example.com, port: {number: 80}}, weight: 50}
    - {destination: {host: reviews.shop.svc.cluster.local, subset: v1}, weight: 50}
`),
			check: func(t *testing.T, out *build.Output, rs []*routev3.Route) {
				wantRoutes(t, rs, 2)
				wc := rs[0].GetRoute().GetWeightedClusters().GetClusters()
				if len(wc) != 3 || wc[0].GetName() != build.ClusterName(reviews, 9080, "v1") || wc[0].GetWeight().GetValue() != 60 ||
					wc[1].GetName() != build.ClusterName(reviews, 9080, "v2") || wc[2].GetName() != build.BlackHoleCluster || wc[2].GetWeight().GetValue() != 10 {
					t.Errorf("split = %v", wc)
				}
				wc = rs[1].GetRoute().GetWeightedClusters().GetClusters()
				if len(wc) != 2 || wc[0].GetName() != build.BlackHoleCluster || wc[1].GetName() != build.ClusterName(reviews, 9080, "v1") {
					t.Errorf("unknown host split = %v", wc)
				}
				wantProblem(t, out, "VirtualService shop/r", "spec.http[0].route[2].destination.subset", `"v9"`)
				wantProblem(t, out, "VirtualService shop/r", "spec.http[1].route[0].destination.host", "nowhere.example.com is not a service")
			},
		},
		{
			name: "rewrite uri, uriRegexRewrite, authority",
			yaml: vsYAML("r", `  hosts: [reviews]
  http:
  - match: [{uri: {prefix: /old}}]
    rewrite: {uri: /new, authority: internal.reviews}
    route: [{destination: {host: reviews}}]
  - rewrite: {uriRegexRewrite: {match: "^/v1/(.*)$", rewrite: "/\\1"}}
    route: [{destination: {host: reviews}}]
`),
			check: func(t *testing.T, out *build.Output, rs []*routev3.Route) {
				wantRoutes(t, rs, 2)
				a := rs[0].GetRoute()
				if a.GetPrefixRewrite() != "/new" || a.GetHostRewriteLiteral() != "internal.reviews" {
					t.Errorf("rewrite = %v", a)
				}
				if rr := rs[1].GetRoute().GetRegexRewrite(); rr.GetPattern().GetRegex() != "^/v1/(.*)$" || rr.GetSubstitution() != `/\1` {
					t.Errorf("regex rewrite = %v", rr)
				}
			},
		},
		{
			name: "redirect",
			yaml: vsYAML("r", `  hosts: [reviews]
  http:
  - match: [{uri: {exact: /old}}]
    redirect: {uri: /new, authority: new.example.com, scheme: https, port: 8443, redirectCode: 302}
`),
			check: func(t *testing.T, out *build.Output, rs []*routev3.Route) {
				wantRoutes(t, rs, 1) // with a VirtualService, no default route is added
				rd := rs[0].GetRedirect()
				if rd.GetPathRedirect() != "/new" || rd.GetHostRedirect() != "new.example.com" || rd.GetSchemeRedirect() != "https" ||
					rd.GetPortRedirect() != 8443 || rd.GetResponseCode() != routev3.RedirectAction_FOUND {
					t.Errorf("redirect = %v", rd)
				}
			},
		},
		{
			name: "directResponse string and bytes",
			yaml: vsYAML("r", `  hosts: [reviews]
  http:
  - match: [{uri: {exact: /s}}]
    directResponse: {status: 418, body: {string: teapot}}
  - match: [{uri: {exact: /b}}]
    directResponse: {status: 200, body: {bytes: aGk=}}
`),
			check: func(t *testing.T, out *build.Output, rs []*routev3.Route) {
				if d := rs[0].GetDirectResponse(); d.GetStatus() != 418 || d.GetBody().GetInlineString() != "teapot" {
					t.Errorf("direct response = %v", d)
				}
				if d := rs[1].GetDirectResponse(); d.GetStatus() != 200 || string(d.GetBody().GetInlineBytes()) != "hi" {
					t.Errorf("direct response bytes = %v", d)
				}
			},
		},
		{
			name: "retries and timeout",
			yaml: vsYAML("r", `  hosts: [reviews]
  http:
  - match: [{uri: {prefix: /a}}]
    retries: {attempts: 3, perTryTimeout: 2s, retryOn: "5xx,gateway-error,503", retryRemoteLocalities: true}
    timeout: 10s
    route: [{destination: {host: reviews}}]
  - match: [{uri: {prefix: /b}}]
    retries: {attempts: 0}
    route: [{destination: {host: reviews}}]
  - route: [{destination: {host: reviews}}]
`),
			check: func(t *testing.T, out *build.Output, rs []*routev3.Route) {
				wantRoutes(t, rs, 3)
				a := rs[0].GetRoute()
				rp := a.GetRetryPolicy()
				if rp.GetNumRetries().GetValue() != 3 || rp.GetPerTryTimeout().AsDuration().Seconds() != 2 ||
					rp.GetRetryOn() != "5xx,gateway-error,retriable-status-codes" || !slices.Equal(rp.GetRetriableStatusCodes(), []uint32{503}) ||
					rp.GetRetryPriority().GetName() != "envoy.retry_priorities.previous_priorities" {
					t.Errorf("retry policy = %v", rp)
				}
				if a.GetTimeout().AsDuration().Seconds() != 10 {
					t.Errorf("timeout = %v", a.GetTimeout())
				}
				if b := rs[1].GetRoute(); b.GetRetryPolicy() != nil || b.GetTimeout() == nil || b.GetTimeout().AsDuration() != 0 {
					t.Errorf("attempts 0 = %v, want no retries and timeout 0", b)
				}
				if rp := rs[2].GetRoute().GetRetryPolicy(); rp.GetNumRetries().GetValue() != 2 || rp.GetRetryOn() != routes.DefaultRetryOn {
					t.Errorf("default retries = %v", rp)
				}
			},
		},
		{
			name: "fault delay and abort",
			yaml: vsYAML("r", `  hosts: [reviews]
  http:
  - fault:
      delay: {fixedDelay: 5s, percentage: {value: 10}}
      abort: {httpStatus: 503, percentage: {value: 0.5}}
    route: [{destination: {host: reviews}}]
`),
			check: func(t *testing.T, out *build.Output, rs []*routev3.Route) {
				var f faultv3.HTTPFault
				if err := rs[0].GetTypedPerFilterConfig()[build.FaultFilter].UnmarshalTo(&f); err != nil {
					t.Fatal(err)
				}
				if f.GetDelay().GetFixedDelay().AsDuration().Seconds() != 5 || f.GetDelay().GetPercentage().GetNumerator() != 100000 ||
					f.GetAbort().GetHttpStatus() != 503 || f.GetAbort().GetPercentage().GetNumerator() != 5000 {
					t.Errorf("fault = %v", &f)
				}
			},
		},
		{
			name: "mirror and mirrors",
			yaml: vsYAML("r", `  hosts: [reviews]
  http:
  - match: [{uri: {prefix: /one}}]
    mirror: {host: reviews, subset: v2}
    mirrorPercentage: {value: 25}
    route: [{destination: {host: reviews, subset: v1}}]
  - mirrors:
    - {destination: {host: ratings, port: {number: 9080}}}
    - {destination: {host: nowhere.example.com}, percentage: {value: 5}}
    route: [{destination: {host: reviews}}]
`),
			check: func(t *testing.T, out *build.Output, rs []*routev3.Route) {
				m := rs[0].GetRoute().GetRequestMirrorPolicies()
				if len(m) != 1 || m[0].GetCluster() != build.ClusterName(reviews, 9080, "v2") || m[0].GetRuntimeFraction().GetDefaultValue().GetNumerator() != 250000 {
					t.Errorf("mirror = %v", m)
				}
				m = rs[1].GetRoute().GetRequestMirrorPolicies()
				if len(m) != 1 || m[0].GetCluster() != build.ClusterName(ratings, 9080, "") || m[0].GetRuntimeFraction().GetDefaultValue().GetNumerator() != 1000000 {
					t.Errorf("mirrors = %v", m)
				}
				wantProblem(t, out, "VirtualService shop/r", "spec.http[1].mirrors[1].destination.host", "not a service")
			},
		},
		{
			name: "header operations on the route and per destination",
			yaml: vsYAML("r", `  hosts: [reviews]
  http:
  - headers:
      request: {set: {x-set: a}, add: {x-add: b}, remove: [x-gone]}
      response: {set: {x-resp: c}, remove: [server]}
    route:
    - destination: {host: reviews, subset: v1}
      weight: 50
      headers: {request: {set: {x-dest: v1}}}
    - {destination: {host: reviews, subset: v2}, weight: 50}
`),
			check: func(t *testing.T, out *build.Output, rs []*routev3.Route) {
				r := rs[0]
				add := r.GetRequestHeadersToAdd()
				if len(add) != 2 || add[0].GetHeader().GetKey() != "x-set" || add[0].GetAppendAction() != corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD ||
					add[1].GetHeader().GetKey() != "x-add" || add[1].GetAppendAction() != corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD {
					t.Errorf("request headers to add = %v", add)
				}
				if !slices.Equal(r.GetRequestHeadersToRemove(), []string{"x-gone"}) || !slices.Equal(r.GetResponseHeadersToRemove(), []string{"server"}) ||
					r.GetResponseHeadersToAdd()[0].GetHeader().GetValue() != "c" {
					t.Errorf("header ops = %v", r)
				}
				wc := r.GetRoute().GetWeightedClusters().GetClusters()
				if wc[0].GetRequestHeadersToAdd()[0].GetHeader().GetKey() != "x-dest" || wc[1].GetRequestHeadersToAdd() != nil {
					t.Errorf("destination headers = %v", wc)
				}
			},
		},
		{
			name: "corsPolicy",
			yaml: vsYAML("r", `  hosts: [reviews]
  http:
  - corsPolicy:
      allowOrigins: [{exact: "https://a.example.com"}, {regex: "https://.*\\.b\\.com"}]
      allowMethods: [GET, POST]
      allowHeaders: [x-a, x-b]
      exposeHeaders: [x-c]
      maxAge: 24h
      allowCredentials: true
    route: [{destination: {host: reviews}}]
`),
			check: func(t *testing.T, out *build.Output, rs []*routev3.Route) {
				var c corsv3.CorsPolicy
				if err := rs[0].GetTypedPerFilterConfig()[build.CorsFilter].UnmarshalTo(&c); err != nil {
					t.Fatal(err)
				}
				o := c.GetAllowOriginStringMatch()
				if len(o) != 2 || o[0].GetExact() != "https://a.example.com" || o[1].GetSafeRegex().GetRegex() != `https://.*\.b\.com` ||
					c.GetAllowMethods() != "GET,POST" || c.GetAllowHeaders() != "x-a,x-b" || c.GetExposeHeaders() != "x-c" ||
					c.GetMaxAge() != "86400" || !c.GetAllowCredentials().GetValue() {
					t.Errorf("cors = %v", &c)
				}
			},
		},
		{
			name: "consistent hash from the destination's DestinationRule",
			yaml: `---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: ratings, namespace: shop}
spec:
  host: ratings
  trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-user}}}
  subsets:
  - name: cookie
    labels: {v: c}
    trafficPolicy: {loadBalancer: {consistentHash: {httpCookie: {name: sess, path: /, ttl: 60s}}}}
  - {name: ip, labels: {v: i}, trafficPolicy: {loadBalancer: {consistentHash: {useSourceIp: true}}}}
  - {name: query, labels: {v: q}, trafficPolicy: {loadBalancer: {consistentHash: {httpQueryParameterName: uid}}}}
` + vsYAML("r", `  hosts: [ratings]
  http:
  - match: [{uri: {prefix: /h}}]
    route: [{destination: {host: ratings}}]
  - match: [{uri: {prefix: /c}}]
    route: [{destination: {host: ratings, subset: cookie}}]
  - match: [{uri: {prefix: /i}}]
    route: [{destination: {host: ratings, subset: ip}}]
  - match: [{uri: {prefix: /q}}]
    route: [{destination: {host: ratings, subset: query}}]
`),
			check: func(t *testing.T, out *build.Output, _ []*routev3.Route) {
				rs := vhost(t, routeConfig(t, out, "9080"), ratings+":9080").GetRoutes()
				wantRoutes(t, rs, 4)
				hp := func(i int) *routev3.RouteAction_HashPolicy {
					if h := rs[i].GetRoute().GetHashPolicy(); len(h) == 1 {
						return h[0]
					}
					t.Fatalf("route %d hash policy = %v", i, rs[i].GetRoute().GetHashPolicy())
					return nil
				}
				if hp(0).GetHeader().GetHeaderName() != "x-user" {
					t.Errorf("header hash = %v", hp(0))
				}
				if c := hp(1).GetCookie(); c.GetName() != "sess" || c.GetPath() != "/" || c.GetTtl().AsDuration().Seconds() != 60 {
					t.Errorf("cookie hash = %v", c)
				}
				if !hp(2).GetConnectionProperties().GetSourceIp() || hp(3).GetQueryParameter().GetName() != "uid" {
					t.Errorf("source ip / query hash = %v / %v", hp(2), hp(3))
				}
			},
		},
		{
			name: "delegate: child matches ANDed under the parent's, conflicts dropped",
			yaml: vsYAML("r", `  hosts: [reviews]
  http:
  - match: [{uri: {prefix: /api}, headers: {x-team: {exact: a}}}]
    timeout: 7s
    delegate: {name: api}
  - route: [{destination: {host: reviews}}]
`) + vsYAML("api", `  http:
  - match: [{uri: {prefix: /api/v2}}]
    route: [{destination: {host: reviews, subset: v2}}]
  - match: [{uri: {prefix: /other}}]
    route: [{destination: {host: reviews, subset: v1}}]
  - route: [{destination: {host: reviews, subset: v1}}]
    timeout: 1s
`),
			check: func(t *testing.T, out *build.Output, rs []*routev3.Route) {
				wantRoutes(t, rs, 3)
				if rs[0].GetMatch().GetPrefix() != "/api/v2" || rs[0].GetMatch().GetHeaders()[0].GetName() != "x-team" ||
					rs[0].GetRoute().GetCluster() != build.ClusterName(reviews, 9080, "v2") || rs[0].GetRoute().GetTimeout().AsDuration().Seconds() != 7 {
					t.Errorf("delegated route = %v", rs[0])
				}
				if rs[1].GetMatch().GetPrefix() != "/api" || rs[1].GetRoute().GetTimeout().AsDuration().Seconds() != 1 {
					t.Errorf("delegated catch-all = %v (parent's uri, child's timeout)", rs[1])
				}
				if rs[2].GetRoute().GetCluster() != build.ClusterName(reviews, 9080, "") {
					t.Errorf("parent's next route = %v", rs[2])
				}
				wantProblem(t, out, "VirtualService shop/api", "spec.http[1].match[0]", "not within")
			},
		},
		{
			name: "delegate with hosts, nested delegation, missing delegate",
			yaml: vsYAML("r", `  hosts: [reviews]
  http:
  - match: [{uri: {prefix: /a}}]
    delegate: {name: ratings-vs}
  - match: [{uri: {prefix: /b}}]
    delegate: {name: middle}
  - match: [{uri: {prefix: /c}}]
    delegate: {name: missing}
  - route: [{destination: {host: reviews}}]
`) + vsYAML("ratings-vs", `  hosts: [ratings]
  http: [{route: [{destination: {host: ratings}}]}]
`) + vsYAML("middle", `  http:
  - match: [{uri: {prefix: /b/x}}]
    delegate: {name: leaf}
  - route: [{destination: {host: reviews, subset: v2}}]
`) + vsYAML("leaf", `  http: [{route: [{destination: {host: reviews}}]}]
`),
			check: func(t *testing.T, out *build.Output, rs []*routev3.Route) {
				wantRoutes(t, rs, 2)
				if rs[0].GetMatch().GetPrefix() != "/b" || rs[0].GetRoute().GetCluster() != build.ClusterName(reviews, 9080, "v2") {
					t.Errorf("routes = %v", rs)
				}
				wantProblem(t, out, "VirtualService shop/ratings-vs", "spec.hosts", "must have no hosts")
				wantProblem(t, out, "VirtualService shop/middle", "spec.http[0].delegate", "one level deep")
				wantProblem(t, out, "VirtualService shop/r", "spec.http[2].delegate", "no VirtualService shop/missing")
			},
		},
		{
			name: "route after a catch-all is unreachable",
			yaml: vsYAML("r", `  hosts: [reviews]
  http:
  - match: [{uri: {prefix: /a}}]
    route: [{destination: {host: reviews, subset: v1}}]
  - match: [{uri: {prefix: /}}]
    route: [{destination: {host: reviews}}]
  - match: [{uri: {prefix: /b}}]
    route: [{destination: {host: reviews, subset: v2}}]
`),
			check: func(t *testing.T, out *build.Output, rs []*routev3.Route) {
				wantRoutes(t, rs, 2)
				wantProblem(t, out, "VirtualService shop/r", "spec.http[2]", "spec.http[2] is unreachable: spec.http[1] matches every request")
			},
		},
		{
			name: "conflicting VirtualServices for one host: the first wins, the others are reported",
			yaml: vsYAML("a-first", `  hosts: [reviews]
  http: [{route: [{destination: {host: reviews, subset: v1}}]}]
`) + vsYAML("b-second", `  hosts: [reviews.shop.svc.cluster.local]
  http: [{route: [{destination: {host: reviews, subset: v2}}]}]
`),
			check: func(t *testing.T, out *build.Output, rs []*routev3.Route) {
				wantRoutes(t, rs, 1)
				if rs[0].GetRoute().GetCluster() != build.ClusterName(reviews, 9080, "v1") {
					t.Errorf("route = %v", rs[0])
				}
				wantProblem(t, out, "VirtualService shop/b-second", "spec.hosts", "already routed")
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := gentest.Snapshot(t, map[string]string{"c1": rdsBase + tc.yaml})
			if tc.mutate != nil {
				tc.mutate(s)
			}
			out := rdsOut(t, s, rdsSidecarKey)
			tc.check(t, out, reviewsRoutes(t, out))
		})
	}
}
