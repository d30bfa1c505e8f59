package envoy

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/gen/routes"
	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

const (
	reviews = "reviews.shop.svc.cluster.local"
	ratings = "ratings.shop.svc.cluster.local"
	details = "details.other.svc.cluster.local"
)

// rdsBase: reviews (HTTP 9080, VIP 10.0.0.10, subsets v1/v2), ratings
// (HTTP 9080 and GRPC 9090, same VIP as reviews), db (TCP), details in
// another namespace.
const rdsBase = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: reviews, namespace: shop}
spec:
  hosts: [reviews.shop.svc.cluster.local]
  addresses: [10.0.0.10]
  ports: [{number: 9080, name: http, protocol: HTTP}]
  resolution: STATIC
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ratings, namespace: shop}
spec:
  hosts: [ratings.shop.svc.cluster.local]
  addresses: [10.0.0.10]
  ports: [{number: 9080, name: http, protocol: HTTP}, {number: 9090, name: grpc, protocol: GRPC}]
  resolution: STATIC
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: shop}
spec:
  hosts: [db.shop.svc.cluster.local]
  ports: [{number: 3306, name: tcp, protocol: TCP}]
  resolution: STATIC
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: details, namespace: other}
spec:
  hosts: [details.other.svc.cluster.local]
  ports: [{number: 9080, name: http, protocol: HTTP}]
  resolution: STATIC
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: shop}
spec:
  host: reviews
  subsets: [{name: v1, labels: {version: v1}}, {name: v2, labels: {version: v2}}]
`

var rdsSidecarKey = proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "shop", Labels: "app=productpage\nversion=v1"}

// envoyOut generates for key and checks that every resource validates.
func rdsOut(t *testing.T, s *mesh.Snapshot, key proxy.Key) *build.Output {
	t.Helper()
	out := generate(s, key)
	for typeURL, rs := range out.Resources {
		for _, r := range rs {
			if err := r.Message.(interface{ ValidateAll() error }).ValidateAll(); err != nil {
				t.Errorf("%s %s: %v", typeURL, r.Name, err)
			}
		}
	}
	return out
}

func routeConfig(t *testing.T, out *build.Output, name string) *routev3.RouteConfiguration {
	t.Helper()
	rc, _ := gentest.ByName(out, typeurl.Route, name).Message.(*routev3.RouteConfiguration)
	if rc == nil {
		var names []string
		for _, r := range out.Resources[typeurl.Route] {
			names = append(names, r.Name)
		}
		t.Fatalf("no route configuration %q; have %v", name, names)
	}
	return rc
}

func vhost(t *testing.T, rc *routev3.RouteConfiguration, name string) *routev3.VirtualHost {
	t.Helper()
	for _, vh := range rc.GetVirtualHosts() {
		if vh.GetName() == name {
			return vh
		}
	}
	t.Fatalf("route configuration %s has no virtual host %q", rc.GetName(), name)
	return nil
}

// reviewsRoutes returns the routes of reviews on 9080 as the sidecar sees them.
func reviewsRoutes(t *testing.T, out *build.Output) []*routev3.Route {
	t.Helper()
	return vhost(t, routeConfig(t, out, "9080"), reviews+":9080").GetRoutes()
}

func rdsHasProblem(out *build.Output, resource, field, reason string) bool {
	for _, p := range out.Problems {
		if strings.Contains(p.Resource, resource) && p.Field == field && strings.Contains(p.Reason, reason) {
			return true
		}
	}
	return false
}

func wantProblem(t *testing.T, out *build.Output, resource, field, reason string) {
	t.Helper()
	if !rdsHasProblem(out, resource, field, reason) {
		t.Errorf("missing problem %s %s %q; have %+v", resource, field, reason, out.Problems)
	}
}

func wantRoutes(t *testing.T, rs []*routev3.Route, n int) {
	t.Helper()
	if len(rs) != n {
		t.Fatalf("routes = %d, want %d: %v", len(rs), n, rs)
	}
}

func vsYAML(name, body string) string {
	return "---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: " + name + ", namespace: shop}\nspec:\n" + body
}

// sidecarResource is a Sidecar in shop that sees everything, with the
// given outbound traffic policy mode.
func sidecarResource(mode string) string {
	return `---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: shop}
spec:
  egress: [{hosts: ["*/*"]}]
  outboundTrafficPolicy: {mode: ` + mode + `}
`
}

func TestSidecarRouteConfigs(t *testing.T) {
	// The Sidecar states ALLOW_ANY explicitly: View.AllowAny reads an
	// unset policy as REGISTRY_ONLY (the enum's zero value).
	out := rdsOut(t, gentest.Snapshot(t, map[string]string{"c1": rdsBase + sidecarResource("ALLOW_ANY")}), rdsSidecarKey)
	var names []string
	for _, r := range out.Resources[typeurl.Route] {
		names = append(names, r.Name)
	}
	if !slices.Equal(names, []string{"9080", "9090"}) {
		t.Fatalf("route configurations = %v, want 9080 and 9090 (no TCP port)", names)
	}
	rc := routeConfig(t, out, "9080")
	if rc.GetValidateClusters() == nil || rc.GetValidateClusters().GetValue() {
		t.Errorf("validate_clusters = %v, want false", rc.GetValidateClusters())
	}
	var vhosts []string
	for _, vh := range rc.GetVirtualHosts() {
		vhosts = append(vhosts, vh.GetName())
	}
	if want := []string{details + ":9080", ratings + ":9080", reviews + ":9080", AllowAnyVirtualHost}; !slices.Equal(vhosts, want) {
		t.Fatalf("virtual hosts = %v, want %v", vhosts, want)
	}

	// Same namespace: every short form; the shared VIP goes to the first
	// service by hostname (ratings), never twice.
	if got, want := vhost(t, rc, ratings+":9080").GetDomains(), []string{
		ratings, ratings + ":9080", "ratings", "ratings:9080", "ratings.shop", "ratings.shop:9080",
		"ratings.shop.svc", "ratings.shop.svc:9080", "ratings.shop.svc.cluster", "ratings.shop.svc.cluster:9080",
		"10.0.0.10", "10.0.0.10:9080"}; !slices.Equal(got, want) {
		t.Errorf("ratings domains = %v, want %v", got, want)
	}
	if got := vhost(t, rc, reviews+":9080").GetDomains(); slices.Contains(got, "10.0.0.10") || !slices.Contains(got, "reviews") {
		t.Errorf("reviews domains = %v: want short names, not ratings' VIP", got)
	}
	// Another namespace: from name.ns on.
	if got, want := vhost(t, rc, details+":9080").GetDomains(), []string{
		details, details + ":9080", "details.other", "details.other:9080", "details.other.svc", "details.other.svc:9080",
		"details.other.svc.cluster", "details.other.svc.cluster:9080"}; !slices.Equal(got, want) {
		t.Errorf("details domains = %v, want %v", got, want)
	}
	seen := map[string]bool{}
	for _, vh := range rc.GetVirtualHosts() {
		for _, d := range vh.GetDomains() {
			if seen[d] {
				t.Errorf("domain %s twice", d)
			}
			seen[d] = true
		}
	}

	// Default route: the port's cluster, no timeout, Istio's default retries.
	rs := vhost(t, rc, reviews+":9080").GetRoutes()
	wantRoutes(t, rs, 1)
	ra := rs[0].GetRoute()
	if rs[0].GetMatch().GetPrefix() != "/" || ra.GetCluster() != build.ClusterName(reviews, 9080, "") || ra.GetTimeout() == nil || ra.GetTimeout().AsDuration() != 0 {
		t.Errorf("default route = %v", rs[0])
	}
	if rp := ra.GetRetryPolicy(); rp.GetNumRetries().GetValue() != 2 || rp.GetRetryOn() != routes.DefaultRetryOn {
		t.Errorf("default retry policy = %v", rp)
	}
	allow := vhost(t, rc, AllowAnyVirtualHost)
	if !slices.Equal(allow.GetDomains(), []string{"*"}) || allow.GetRoutes()[0].GetRoute().GetCluster() != build.PassthroughCluster {
		t.Errorf("allow_any = %v", allow)
	}
	// The 9090 configuration has only ratings' GRPC port.
	rc9090 := routeConfig(t, out, "9090")
	if n := len(rc9090.GetVirtualHosts()); n != 2 {
		t.Errorf("9090 virtual hosts = %d, want ratings + allow_any", n)
	}

	// REGISTRY_ONLY: block_all answers 502.
	out = rdsOut(t, gentest.Snapshot(t, map[string]string{"c1": rdsBase + sidecarResource("REGISTRY_ONLY")}), rdsSidecarKey)
	block := vhost(t, routeConfig(t, out, "9080"), BlockAllVirtualHost)
	if block.GetRoutes()[0].GetDirectResponse().GetStatus() != 502 || !slices.Equal(block.GetDomains(), []string{"*"}) {
		t.Errorf("block_all = %v", block)
	}
}

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

const gatewayYAML = `---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: shop}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 80, name: http, protocol: HTTP}
    hosts: ["*.example.com"]
    tls: {httpsRedirect: true}
  - name: shop-tls
    port: {number: 443, name: https, protocol: HTTPS}
    hosts: ["shop/*.example.com"]
    tls: {mode: SIMPLE, credentialName: cert}
  - port: {number: 443, protocol: HTTPS}
    hosts: ["other/*.example.com"]
    tls: {mode: SIMPLE, credentialName: cert2}
  - port: {number: 8443, name: passthrough, protocol: TLS}
    hosts: ["*"]
    tls: {mode: PASSTHROUGH}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw2, namespace: shop}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 80, name: http, protocol: HTTP}
    hosts: ["api.internal"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: a-old, namespace: shop, creationTimestamp: "2020-01-01T00:00:00Z"}
spec:
  hosts: [bookinfo.example.com]
  gateways: [gw]
  http:
  - match: [{uri: {prefix: /old}}]
    route: [{destination: {host: reviews}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: 0-new, namespace: shop, creationTimestamp: "2021-01-01T00:00:00Z"}
spec:
  hosts: [bookinfo.example.com]
  gateways: [shop/gw, mesh]
  http:
  - match: [{uri: {prefix: /new}, gateways: [gw]}, {uri: {prefix: /mesh-only}, gateways: [mesh]}]
    route: [{destination: {host: ratings, port: {number: 9080}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: api, namespace: shop}
spec:
  hosts: [api.internal]
  gateways: [gw2]
  http: [{route: [{destination: {host: ratings, port: {number: 9090}}}]}]
`

var routerKey = proxy.Key{Type: proxy.Router, Mesh: "m", Namespace: "istio-system", Labels: "istio=ingressgateway"}

func TestGatewayRoutes(t *testing.T) {
	out := rdsOut(t, gentest.Snapshot(t, map[string]string{"c1": rdsBase + gatewayYAML}), routerKey)
	var names []string
	for _, r := range out.Resources[typeurl.Route] {
		names = append(names, r.Name)
	}
	want := []string{GatewayHTTPRouteName(80), GatewayHTTPSRouteName(443, "2", "gw", "shop"), GatewayHTTPSRouteName(443, "shop-tls", "gw", "shop")}
	if !slices.Equal(names, want) {
		t.Fatalf("route configurations = %v, want %v (no passthrough server)", names, want)
	}

	// Port 80: both gateways' HTTP servers merged; the VirtualServices of
	// one host merged oldest first; httpsRedirect requires TLS.
	rc := routeConfig(t, out, GatewayHTTPRouteName(80))
	vh := vhost(t, rc, "bookinfo.example.com:80")
	if !slices.Equal(vh.GetDomains(), []string{"bookinfo.example.com", "bookinfo.example.com:80"}) || vh.GetRequireTls() != routev3.VirtualHost_ALL {
		t.Errorf("bookinfo vhost = %v", vh)
	}
	rs := vh.GetRoutes()
	wantRoutes(t, rs, 2)
	if rs[0].GetMatch().GetPrefix() != "/old" || rs[1].GetMatch().GetPrefix() != "/new" || rs[1].GetRoute().GetCluster() != build.ClusterName(ratings, 9080, "") {
		t.Errorf("merged routes = %v", rs)
	}
	api := vhost(t, rc, "api.internal:80")
	if api.GetRequireTls() != routev3.VirtualHost_NONE || api.GetRoutes()[0].GetRoute().GetCluster() != build.ClusterName(ratings, 9090, "") {
		t.Errorf("api vhost = %v", api)
	}

	// The named TLS server: hosts of VirtualServices in shop only.
	https := routeConfig(t, out, GatewayHTTPSRouteName(443, "shop-tls", "gw", "shop"))
	if len(https.GetVirtualHosts()) != 1 || https.GetVirtualHosts()[0].GetName() != "bookinfo.example.com:443" ||
		https.GetVirtualHosts()[0].GetRequireTls() != routev3.VirtualHost_NONE {
		t.Errorf("https route config = %v", https)
	}
	// The unnamed one admits only namespace "other": nothing.
	if n := len(routeConfig(t, out, GatewayHTTPSRouteName(443, "2", "gw", "shop")).GetVirtualHosts()); n != 0 {
		t.Errorf("other-namespace server virtual hosts = %d, want 0", n)
	}

	// The mesh-bound VirtualService applies to sidecars too, with only its
	// mesh match, and gateway-only ones do not.
	side := rdsOut(t, gentest.Snapshot(t, map[string]string{"c1": rdsBase + gatewayYAML}), rdsSidecarKey)
	if n := len(side.Resources[typeurl.Route]); n != 2 {
		t.Fatalf("sidecar route configurations = %d", n)
	}
	// A sidecar proxy gets no gateway routes.
	for _, r := range side.Resources[typeurl.Route] {
		if strings.HasPrefix(r.Name, "http.") || strings.HasPrefix(r.Name, "https.") {
			t.Errorf("sidecar got %s", r.Name)
		}
	}

	// One VirtualService through two gateways sharing a port: its routes
	// once.
	twice := strings.Replace(gatewayYAML, "gateways: [gw2]", "gateways: [gw2, gw]", 1)
	twice = strings.Replace(twice, `hosts: ["*.example.com"]`, `hosts: ["*.example.com", api.internal]`, 1)
	out = rdsOut(t, gentest.Snapshot(t, map[string]string{"c1": rdsBase + twice}), routerKey)
	if rs := vhost(t, routeConfig(t, out, GatewayHTTPRouteName(80)), "api.internal:80").GetRoutes(); len(rs) != 1 {
		t.Errorf("api.internal routes = %v, want one", rs)
	}

	// A wildcard VirtualService host matches a concrete server host.
	wild := rdsBase + `---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: shop}
spec:
  servers: [{port: {number: 8080, name: http, protocol: HTTP}, hosts: [shop.example.com]}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: wild, namespace: shop}
spec:
  hosts: ["*.example.com"]
  gateways: [gw]
  http: [{route: [{destination: {host: reviews}}]}]
`
	out = rdsOut(t, gentest.Snapshot(t, map[string]string{"c1": wild}), routerKey)
	vh = vhost(t, routeConfig(t, out, GatewayHTTPRouteName(8080)), "shop.example.com:8080")
	if vh.GetRoutes()[0].GetRoute().GetCluster() != build.ClusterName(reviews, 9080, "") {
		t.Errorf("wildcard vhost = %v", vh)
	}
}

func TestEnvoyRoutesDeterministic(t *testing.T) {
	y := map[string]string{"c1": rdsBase + gatewayYAML, "c2": rdsBase}
	for _, key := range []proxy.Key{rdsSidecarKey, routerKey} {
		a := generate(gentest.Snapshot(t, y), key)
		b := generate(gentest.Snapshot(t, y), key)
		ra, rb := a.Resources[typeurl.Route], b.Resources[typeurl.Route]
		if len(ra) == 0 || len(ra) != len(rb) {
			t.Fatalf("%s: %d vs %d route configurations", key.Type, len(ra), len(rb))
		}
		for i := range ra {
			ma, _ := proto.MarshalOptions{Deterministic: true}.Marshal(ra[i].Message)
			mb, _ := proto.MarshalOptions{Deterministic: true}.Marshal(rb[i].Message)
			if ra[i].Name != rb[i].Name || string(ma) != string(mb) {
				t.Errorf("%s: route configuration %s differs between runs", key.Type, ra[i].Name)
			}
		}
	}
}

// BenchmarkEnvoyRoutes measures generating and marshalling a sidecar's
// route configurations (gentest.DemoServices: every service has a VirtualService).
func BenchmarkEnvoyRoutes(b *testing.B) {
	key := proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "ns-0", Labels: "app=client"}
	for _, n := range []int{100, 1000} {
		snap := mesh.Build("m", gentest.DemoServices(b, n))
		b.Run("services="+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			var bytes, resources int
			for b.Loop() {
				bytes, resources = 0, 0
				for _, r := range Routes(scope.New(snap, key)) {
					m, err := proto.Marshal(r.Message)
					if err != nil {
						b.Fatal(err)
					}
					bytes += len(m)
					resources++
				}
			}
			b.ReportMetric(float64(bytes)/1024, "kb/msg")
			b.ReportMetric(float64(resources), "resources/msg")
		})
	}
}

// TestEnvoyRoutesBenchmarkOnce is BenchmarkEnvoyRoutes' test twin.
func TestEnvoyRoutesBenchmarkOnce(t *testing.T) {
	key := proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "ns-0", Labels: "app=client"}
	v := scope.New(mesh.Build("m", gentest.DemoServices(t, 50)), key)
	rs := Routes(v)
	if len(rs) != 1 {
		t.Fatalf("route configurations = %d, want 1 (port 7070)", len(rs))
	}
	if n := len(rs[0].Message.(*routev3.RouteConfiguration).GetVirtualHosts()); n != 51 {
		t.Fatalf("virtual hosts = %d, want 50 + catch-all", n)
	}
	if p := v.Problems().List(); len(p) != 0 {
		t.Fatalf("problems: %+v", p)
	}
}

// TestGatewayServersWithSameHostsShareRoutes: two TLS-terminated servers of
// one gateway with the same port and hosts (two certificates) get route
// configurations that differ only in name; a server with other hosts does
// not share them.
func TestGatewayServersWithSameHostsShareRoutes(t *testing.T) {
	y := strings.Replace(gatewayYAML, `  - port: {number: 443, protocol: HTTPS}
    hosts: ["other/*.example.com"]`, `  - port: {number: 443, protocol: HTTPS}
    hosts: ["shop/*.example.com"]`, 1)
	if y == gatewayYAML {
		t.Fatal("the test's edit of gatewayYAML did not apply")
	}
	byName := map[string]*routev3.RouteConfiguration{}
	for _, y := range []string{y, gatewayYAML} {
		out := rdsOut(t, gentest.Snapshot(t, map[string]string{"c1": rdsBase + y}), routerKey)
		for _, r := range out.Resources[typeurl.Route] {
			byName[r.Name+"|"+strconv.Itoa(len(y))] = r.Message.(*routev3.RouteConfiguration)
		}
	}
	a := byName[GatewayHTTPSRouteName(443, "shop-tls", "gw", "shop")+"|"+strconv.Itoa(len(y))]
	b := byName[GatewayHTTPSRouteName(443, "2", "gw", "shop")+"|"+strconv.Itoa(len(y))]
	if a == nil || b == nil || a.GetName() == b.GetName() {
		t.Fatalf("route configurations missing or not renamed: %v, %v", a.GetName(), b.GetName())
	}
	if !proto.Equal(&routev3.RouteConfiguration{VirtualHosts: a.GetVirtualHosts()}, &routev3.RouteConfiguration{VirtualHosts: b.GetVirtualHosts()}) {
		t.Error("servers with the same hosts route differently")
	}
	// Unchanged config: the server with other hosts routes differently.
	c := byName[GatewayHTTPSRouteName(443, "2", "gw", "shop")+"|"+strconv.Itoa(len(gatewayYAML))]
	if proto.Equal(&routev3.RouteConfiguration{VirtualHosts: a.GetVirtualHosts()}, &routev3.RouteConfiguration{VirtualHosts: c.GetVirtualHosts()}) {
		t.Error("servers with different hosts share routes")
	}
}
