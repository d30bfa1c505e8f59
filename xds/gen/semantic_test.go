package gen_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/navemesh/nave/internal/envoysim"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/gen"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/envoy"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// semanticMesh exercises every feature the semantic tests below walk
// through: services in two namespaces (HTTP, TCP, egress TLS), subsets and
// traffic policy, a VirtualService using most HTTP route features, a
// delegate, a Sidecar resource, a gateway and locality failover.
const semanticMesh = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: reviews, namespace: shop}
spec:
  hosts: [reviews.shop.svc.cluster.local]
  addresses: [10.96.0.10]
  ports: [{number: 9080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints:
  - {address: 10.1.0.1, labels: {version: v1}, locality: us-east/a}
  - {address: 10.1.0.2, labels: {version: v2}, locality: us-east/b}
  - {address: 10.1.0.3, labels: {version: v2}, locality: us-west/a}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ratings, namespace: shop}
spec:
  hosts: [ratings.shop.svc.cluster.local]
  addresses: [10.96.0.11]
  ports: [{number: 9080, name: http, protocol: HTTP}, {number: 5432, name: tcp-db, protocol: TCP}]
  resolution: STATIC
  endpoints: [{address: 10.1.1.1, locality: us-east/a}, {address: 10.1.1.2, locality: us-west/a}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: frontend, namespace: web}
spec:
  hosts: [frontend.web.svc.cluster.local]
  ports: [{number: 8080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.2.0.1}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: payments, namespace: shop}
spec:
  hosts: [api.payments.example]
  ports: [{number: 443, name: tls, protocol: TLS}]
  location: MESH_EXTERNAL
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: shop}
spec:
  host: reviews
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}, trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-user}}}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: ratings, namespace: shop}
spec:
  host: ratings
  trafficPolicy:
    outlierDetection: {consecutive5xxErrors: 5, interval: 10s, baseEjectionTime: 30s}
    loadBalancer: {localityLbSetting: {enabled: true, failover: [{from: us-east, to: us-west}]}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: shop}
spec:
  hosts: [reviews]
  http:
  - name: beta
    match: [{headers: {x-user: {exact: beta}}, uri: {prefix: /api}}]
    route: [{destination: {host: reviews, subset: v2}}]
    retries: {attempts: 3, perTryTimeout: 2s, retryOn: 5xx}
    fault: {delay: {fixedDelay: 100ms, percentage: {value: 10}}}
  - name: moved
    match: [{uri: {exact: /old}}]
    redirect: {uri: /new, redirectCode: 301}
  - name: teapot
    match: [{uri: {regex: "/tea(pot)?"}, method: {exact: BREW}}]
    directResponse: {status: 418, body: {string: short and stout}}
  - name: case-insensitive
    match: [{uri: {prefix: /Static}, ignoreUriCase: true}]
    rewrite: {uri: /assets}
    route: [{destination: {host: reviews, subset: v1}}]
  - name: query
    match: [{queryParams: {debug: {exact: "1"}}}]
    route: [{destination: {host: reviews, subset: v1}}]
    mirror: {host: ratings}
    mirrorPercentage: {value: 25}
  - name: only-for-productpage
    match: [{sourceLabels: {app: productpage}, uri: {prefix: /pp}}]
    route: [{destination: {host: reviews, subset: v2}}]
  - name: no-such-subset
    match: [{uri: {prefix: /broken}}]
    route: [{destination: {host: reviews, subset: v9}}]
  - name: delegated
    match: [{uri: {prefix: /delegated}}]
    delegate: {name: reviews-child, namespace: shop}
  - name: split
    route:
    - {destination: {host: reviews, subset: v1}, weight: 90}
    - {destination: {host: reviews, subset: v2}, weight: 10}
    timeout: 5s
    headers: {request: {set: {x-split: "yes"}, remove: [x-debug]}}
    corsPolicy: {allowOrigins: [{exact: "https://shop.example"}], allowMethods: [GET]}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews-child, namespace: shop}
spec:
  http:
  - match: [{uri: {prefix: /delegated/v2}}]
    route: [{destination: {host: reviews, subset: v2}}]
  - route: [{destination: {host: reviews, subset: v1}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ratings-db, namespace: shop}
spec:
  hosts: [ratings]
  tcp: [{match: [{port: 5432}], route: [{destination: {host: ratings, port: {number: 5432}}}]}]
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: web}
spec:
  egress: [{hosts: [./*, shop/reviews.shop.svc.cluster.local]}]
  outboundTrafficPolicy: {mode: REGISTRY_ONLY}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: public, namespace: web}
spec:
  selector: {istio: ingressgateway}
  servers:
  - {port: {number: 80, name: http, protocol: HTTP}, hosts: [shop.example.com], tls: {httpsRedirect: true}}
  - {port: {number: 443, name: https, protocol: HTTPS}, hosts: [shop.example.com], tls: {mode: SIMPLE, credentialName: shop-cert}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: public, namespace: web}
spec:
  hosts: [shop.example.com]
  gateways: [public]
  http:
  - match: [{uri: {prefix: /reviews}}]
    rewrite: {uri: /}
    route: [{destination: {host: reviews.shop.svc.cluster.local, port: {number: 9080}}}]
  - route: [{destination: {host: frontend.web.svc.cluster.local}}]
`

var (
	shopSidecar = proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "shop", Labels: "app=productpage", IPs: "10.1.9.9",
		Locality: mesh.Locality{Region: "us-east", Zone: "a"}}
	reviewsSidecar = proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "shop", Labels: "version=v1", IPs: "10.1.0.1",
		Locality: mesh.Locality{Region: "us-east", Zone: "a"}}
	webSidecar = proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "web", Labels: "app=frontend", IPs: "10.2.0.1"}
	ingress    = proxy.Key{Type: proxy.Router, Mesh: "m", Namespace: "istio-system", Labels: "istio=ingressgateway", IPs: "10.3.0.1", SDSCluster: "sds-grpc"}
)

const (
	reviewsV1 = "outbound|9080|v1|reviews.shop.svc.cluster.local"
	reviewsV2 = "outbound|9080|v2|reviews.shop.svc.cluster.local"
)

// TestSemantics walks generated config with the simulator: for each proxy
// and request, which listener, route and clusters it reaches and what
// applies on the way. Each case names the feature it proves.
func TestSemantics(t *testing.T) {
	objs, errs := meshconfig.DecodeYAML([]byte(semanticMesh), "semantic.yaml")
	if len(errs) > 0 {
		t.Fatal(errs[0])
	}
	snap := mesh.Build("m", []mesh.ClusterInput{{Name: "c1", Synced: true, Connected: true, Objects: objs}})
	outs := map[proxy.Key]*gen.Output{}
	sims := map[proxy.Key]*envoysim.Sim{}
	for _, k := range []proxy.Key{shopSidecar, reviewsSidecar, webSidecar, ingress} {
		outs[k] = gen.Envoy(snap, k)
		sims[k] = envoysim.New(outs[k].Resources)
		for typeURL, rs := range outs[k].Resources {
			for _, r := range rs {
				if err := r.Message.(interface{ ValidateAll() error }).ValidateAll(); err != nil {
					t.Errorf("%s %s: %v", typeURL, r.Name, err)
				}
			}
		}
	}
	http := func(authority, path string, headers map[string]string) envoysim.Request {
		return envoysim.Request{IP: "10.96.0.10", Port: 9080, Authority: authority, Path: path, Method: "GET", Headers: headers}
	}
	for _, tc := range []struct {
		name  string
		key   proxy.Key
		req   envoysim.Request
		check func(t *testing.T, r envoysim.Result)
	}{
		{"header and prefix match pick a subset; retries and fault apply", shopSidecar,
			http("reviews:9080", "/api/x", map[string]string{"x-user": "beta"}), func(t *testing.T, r envoysim.Result) {
				wantClusters(t, r, reviewsV2+"=1")
				if r.Listener != "0.0.0.0_9080" || r.RouteConfig != "9080" {
					t.Errorf("listener %s route config %s", r.Listener, r.RouteConfig)
				}
				if r.Retry.GetNumRetries().GetValue() != 3 || r.Retry.GetRetryOn() != "5xx" || r.Retry.GetPerTryTimeout().AsDuration() != 2*time.Second {
					t.Errorf("retry policy %v", r.Retry)
				}
				if d := r.Fault.GetDelay(); d.GetFixedDelay().AsDuration() != 100*time.Millisecond || d.GetPercentage().GetNumerator() != 100000 {
					t.Errorf("fault %v", r.Fault)
				}
				if got := r.Clusters[0].Addresses(0); !slices.Equal(got, []string{"10.1.0.2:9080", "10.1.0.3:9080"}) {
					t.Errorf("v2 endpoints %v", got)
				}
				if len(r.Route.GetRoute().GetHashPolicy()) == 0 || r.Clusters[0].Cluster.GetLbPolicy() != clusterv3.Cluster_RING_HASH {
					t.Errorf("consistent hash: route hash policy %v, cluster lb %v", r.Route.GetRoute().GetHashPolicy(), r.Clusters[0].Cluster.GetLbPolicy())
				}
			}},
		{"a header match fails without the header: the split applies, with timeout, header ops and CORS", shopSidecar,
			http("reviews.shop.svc.cluster.local:9080", "/api/x", nil), func(t *testing.T, r envoysim.Result) {
				wantClusters(t, r, reviewsV1+"=90", reviewsV2+"=10")
				if r.Timeout == nil || *r.Timeout != 5*time.Second {
					t.Errorf("timeout %v", r.Timeout)
				}
				if !slices.Contains(r.Route.GetRequestHeadersToRemove(), "x-debug") || len(r.Route.GetRequestHeadersToAdd()) != 1 {
					t.Errorf("header ops: add %v remove %v", r.Route.GetRequestHeadersToAdd(), r.Route.GetRequestHeadersToRemove())
				}
				if r.CORS == nil || r.CORS.GetAllowOriginStringMatch()[0].GetExact() != "https://shop.example" {
					t.Errorf("cors %v", r.CORS)
				}
			}},
		{"the VIP and short names reach the same virtual host", shopSidecar,
			http("10.96.0.10:9080", "/", nil), func(t *testing.T, r envoysim.Result) {
				if r.VirtualHost != "reviews.shop.svc.cluster.local:9080" {
					t.Errorf("virtual host %q", r.VirtualHost)
				}
			}},
		{"exact uri redirect", shopSidecar, http("reviews:9080", "/old", nil), func(t *testing.T, r envoysim.Result) {
			if r.Redirect.GetPathRedirect() != "/new" || r.Redirect.GetResponseCode() != routev3.RedirectAction_MOVED_PERMANENTLY {
				t.Errorf("redirect %v", r.Redirect)
			}
		}},
		{"regex uri and method: direct response", shopSidecar,
			envoysim.Request{IP: "10.96.0.10", Port: 9080, Authority: "reviews:9080", Path: "/teapot", Method: "BREW"}, func(t *testing.T, r envoysim.Result) {
				if r.DirectResponse.GetStatus() != 418 || r.DirectResponse.GetBody().GetInlineString() != "short and stout" {
					t.Errorf("direct response %v", r.DirectResponse)
				}
			}},
		{"a regex must match the whole path", shopSidecar,
			envoysim.Request{IP: "10.96.0.10", Port: 9080, Authority: "reviews:9080", Path: "/teapots", Method: "BREW"}, func(t *testing.T, r envoysim.Result) {
				if r.DirectResponse != nil {
					t.Errorf("/teapots matched the regex route")
				}
			}},
		{"ignoreUriCase and rewrite", shopSidecar, http("reviews:9080", "/STATIC/app.js", nil), func(t *testing.T, r envoysim.Result) {
			wantClusters(t, r, reviewsV1+"=1")
			if r.Route.GetRoute().GetPrefixRewrite() != "/assets" {
				t.Errorf("rewrite %q", r.Route.GetRoute().GetPrefixRewrite())
			}
		}},
		{"query parameter match and mirror with percentage", shopSidecar, http("reviews:9080", "/x?debug=1", nil), func(t *testing.T, r envoysim.Result) {
			wantClusters(t, r, reviewsV1+"=1")
			if len(r.Mirrors) != 1 || r.Mirrors[0].GetCluster() != "outbound|9080||ratings.shop.svc.cluster.local" ||
				r.Mirrors[0].GetRuntimeFraction().GetDefaultValue().GetNumerator() != 250000 {
				t.Errorf("mirrors %v", r.Mirrors)
			}
		}},
		{"sourceLabels: the route exists for a matching proxy", shopSidecar, http("reviews:9080", "/pp", nil), func(t *testing.T, r envoysim.Result) {
			wantClusters(t, r, reviewsV2+"=1")
		}},
		{"sourceLabels: and not for another", reviewsSidecar, http("reviews:9080", "/pp", nil), func(t *testing.T, r envoysim.Result) {
			wantClusters(t, r, reviewsV1+"=90", reviewsV2+"=10")
		}},
		{"a missing subset goes nowhere, visibly", shopSidecar, http("reviews:9080", "/broken", nil), func(t *testing.T, r envoysim.Result) {
			wantClusters(t, r, build.BlackHoleCluster+"=1")
			if len(r.Clusters[0].Endpoints) != 0 {
				t.Errorf("blackhole has endpoints %v", r.Clusters[0].Endpoints)
			}
		}},
		{"delegate: the child's more specific route under the parent's prefix", shopSidecar,
			http("reviews:9080", "/delegated/v2/x", nil), func(t *testing.T, r envoysim.Result) { wantClusters(t, r, reviewsV2+"=1") }},
		{"delegate: the child's catch-all stays under the parent's prefix", shopSidecar,
			http("reviews:9080", "/delegated/other", nil), func(t *testing.T, r envoysim.Result) { wantClusters(t, r, reviewsV1+"=1") }},
		{"TCP to a VIP: tcp_proxy on the VIP's listener", shopSidecar, envoysim.Request{IP: "10.96.0.11", Port: 5432}, func(t *testing.T, r envoysim.Result) {
			if r.Listener != "10.96.0.11_5432" || len(r.TCP) != 1 || r.TCP[0].Name != "outbound|5432||ratings.shop.svc.cluster.local" {
				t.Errorf("listener %s tcp %v", r.Listener, envoysim.ClusterNames(r.TCP))
			}
		}},
		{"locality failover: same zone first, then region, then the failover region", shopSidecar,
			envoysim.Request{IP: "10.96.0.11", Port: 5432}, func(t *testing.T, r envoysim.Result) {
				if p0, p1 := r.TCP[0].Addresses(0), r.TCP[0].Addresses(1); !slices.Equal(p0, []string{"10.1.1.1:5432"}) || !slices.Equal(p1, []string{"10.1.1.2:5432"}) {
					t.Errorf("priorities: p0 %v p1 %v", p0, p1)
				}
			}},
		{"egress TLS by SNI to a DNS service", shopSidecar,
			envoysim.Request{IP: "203.0.113.7", Port: 443, SNI: "api.payments.example"}, func(t *testing.T, r envoysim.Result) {
				if len(r.TCP) != 1 || r.TCP[0].Name != "outbound|443||api.payments.example" ||
					r.TCP[0].Cluster.GetType() != clusterv3.Cluster_STRICT_DNS || r.TCP[0].Endpoints[0].Address != "api.payments.example" {
					t.Errorf("tcp %v", envoysim.ClusterNames(r.TCP))
				}
			}},
		{"unknown destination passes through (ALLOW_ANY)", shopSidecar, envoysim.Request{IP: "10.99.0.1", Port: 7777}, func(t *testing.T, r envoysim.Result) {
			if r.Listener != envoy.VirtualOutboundListener || len(r.TCP) != 1 || r.TCP[0].Name != build.PassthroughCluster {
				t.Errorf("listener %s tcp %v", r.Listener, envoysim.ClusterNames(r.TCP))
			}
		}},
		{"unknown destination is dropped (REGISTRY_ONLY)", webSidecar, envoysim.Request{IP: "10.99.0.1", Port: 7777}, func(t *testing.T, r envoysim.Result) {
			if len(r.TCP) != 1 || r.TCP[0].Name != build.BlackHoleCluster {
				t.Errorf("tcp %v", envoysim.ClusterNames(r.TCP))
			}
		}},
		{"unknown HTTP host passes through (ALLOW_ANY)", shopSidecar, http("elsewhere.example:9080", "/", nil), func(t *testing.T, r envoysim.Result) {
			wantClusters(t, r, build.PassthroughCluster+"=1")
		}},
		{"Sidecar egress hides ratings; REGISTRY_ONLY answers 502", webSidecar,
			envoysim.Request{IP: "10.96.0.11", Port: 9080, Authority: "ratings.shop.svc.cluster.local:9080", Path: "/", Method: "GET"}, func(t *testing.T, r envoysim.Result) {
				if r.DirectResponse.GetStatus() != 502 {
					t.Errorf("vhost %s, direct response %v, clusters %v", r.VirtualHost, r.DirectResponse, envoysim.ClusterNames(r.Clusters))
				}
			}},
		{"Sidecar egress keeps reviews visible from web", webSidecar,
			http("reviews.shop.svc.cluster.local:9080", "/x", nil), func(t *testing.T, r envoysim.Result) {
				wantClusters(t, r, reviewsV1+"=90", reviewsV2+"=10")
			}},
		{"inbound: the workload's port goes to its inbound cluster", reviewsSidecar,
			envoysim.Request{Inbound: true, IP: "10.1.0.1", Port: 9080, Authority: "reviews:9080", Path: "/", Method: "GET"}, func(t *testing.T, r envoysim.Result) {
				wantClusters(t, r, build.InboundClusterName(9080)+"=1")
				if r.Clusters[0].Endpoints[0].Address != "127.0.0.1" {
					t.Errorf("inbound endpoints %v", r.Clusters[0].Endpoints)
				}
			}},
		{"inbound: another port passes through", reviewsSidecar, envoysim.Request{Inbound: true, IP: "10.1.0.1", Port: 15000}, func(t *testing.T, r envoysim.Result) {
			if len(r.TCP) != 1 || r.TCP[0].Name != build.InboundPassthroughCluster {
				t.Errorf("tcp %v", envoysim.ClusterNames(r.TCP))
			}
		}},
		{"gateway HTTP server with httpsRedirect requires TLS", ingress,
			envoysim.Request{ListenerPort: 80, Authority: "shop.example.com", Path: "/", Method: "GET"}, func(t *testing.T, r envoysim.Result) {
				if r.RouteConfig != envoy.GatewayHTTPRouteName(80) || r.VirtualHostConfig.GetRequireTls() != routev3.VirtualHost_ALL {
					t.Errorf("route config %s require_tls %v", r.RouteConfig, r.VirtualHostConfig.GetRequireTls())
				}
			}},
		{"gateway HTTPS: SNI chain, rewrite, route into the mesh", ingress,
			envoysim.Request{ListenerPort: 443, SNI: "shop.example.com", Authority: "shop.example.com", Path: "/reviews/1", Method: "GET"}, func(t *testing.T, r envoysim.Result) {
				wantClusters(t, r, "outbound|9080||reviews.shop.svc.cluster.local=1")
				if r.Route.GetRoute().GetPrefixRewrite() != "/" || !strings.HasPrefix(r.RouteConfig, "https.443.") {
					t.Errorf("route config %s rewrite %q", r.RouteConfig, r.Route.GetRoute().GetPrefixRewrite())
				}
			}},
		{"gateway HTTPS: the rest goes to the frontend", ingress,
			envoysim.Request{ListenerPort: 443, SNI: "shop.example.com", Authority: "shop.example.com", Path: "/", Method: "GET"}, func(t *testing.T, r envoysim.Result) {
				wantClusters(t, r, "outbound|8080||frontend.web.svc.cluster.local=1")
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := sims[tc.key].Do(tc.req)
			if r.Err != nil {
				t.Fatalf("%v (listener %s, chain %s, route config %s, vhost %s)", r.Err, r.Listener, r.Chain, r.RouteConfig, r.VirtualHost)
			}
			tc.check(t, r)
		})
	}

	// The missing subset is reported, naming the resource and field.
	found := false
	for _, p := range outs[shopSidecar].Problems {
		found = found || (strings.Contains(p.Resource, "VirtualService shop/reviews") && strings.Contains(p.Field, "subset"))
	}
	if !found {
		t.Errorf("no problem reported for the missing subset: %+v", outs[shopSidecar].Problems)
	}
}

func wantClusters(t *testing.T, r envoysim.Result, want ...string) {
	t.Helper()
	got := envoysim.ClusterNames(r.Clusters)
	if !slices.Equal(got, want) {
		t.Fatalf("route %q (vhost %s) sends to %v, want %v", r.Route.GetName(), r.VirtualHost, got, want)
	}
	for _, d := range r.Clusters {
		if d.Err != nil {
			t.Errorf("%s: %v", d.Name, d.Err)
		}
	}
}
