package envoy

import (
	"slices"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/proxy"
)

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
  - port: {number: 9443, protocol: HTTPS}
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

var routerKey = proxy.Key{Type: proxy.Router, Mesh: "m", Namespace: "istio-system", Labels: "istio=ingressgateway", SDSCluster: "sds-grpc"}

func TestGatewayRoutes(t *testing.T) {
	out := rdsOut(t, gentest.Snapshot(t, map[string]string{"c1": rdsBase + gatewayYAML}), routerKey)
	var names []string
	for _, r := range out.Resources[typeurl.Route] {
		names = append(names, r.Name)
	}
	want := []string{GatewayHTTPRouteName(80), GatewayHTTPSRouteName(443, "shop-tls", "gw", "shop"), GatewayHTTPSRouteName(9443, "2", "gw", "shop")}
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
	if n := len(routeConfig(t, out, GatewayHTTPSRouteName(9443, "2", "gw", "shop")).GetVirtualHosts()); n != 0 {
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

// TestGatewayRoutesAreThoseListenersReferTo: RDS sends a router exactly
// the route configurations its listeners refer to. A server LDS does not
// serve (here a TLS server with the server names of an earlier one on the
// same port, as the gateways benchmark shape had six per Gateway) gets
// none, and servers on one plain HTTP port share one.
func TestGatewayRoutesAreThoseListenersReferTo(t *testing.T) {
	dup := strings.Replace(gatewayYAML, `  - port: {number: 9443, protocol: HTTPS}
    hosts: ["other/*.example.com"]`, `  - port: {number: 443, protocol: HTTPS}
    hosts: ["other/*.example.com"]`, 1)
	if dup == gatewayYAML {
		t.Fatal("the test's edit of gatewayYAML did not apply")
	}
	shape := envoyShapes[slices.IndexFunc(envoyShapes, func(sh envoyShape) bool { return sh.name == "gateways" })]
	bench := &strings.Builder{}
	for i := range 3 {
		shape.write(bench, i)
	}
	for _, tc := range []struct {
		name, yaml string
		key        proxy.Key
		want       []string
	}{
		{"gateways", rdsBase + gatewayYAML, routerKey,
			[]string{GatewayHTTPRouteName(80), GatewayHTTPSRouteName(443, "shop-tls", "gw", "shop"), GatewayHTTPSRouteName(9443, "2", "gw", "shop")}},
		{"same server names on one port", rdsBase + dup, routerKey,
			[]string{GatewayHTTPRouteName(80), GatewayHTTPSRouteName(443, "shop-tls", "gw", "shop")}},
		{"benchmark shape", bench.String(), shape.key,
			[]string{GatewayHTTPRouteName(80), GatewayHTTPSRouteName(443, "1", "gateway-0", "gateway"),
				GatewayHTTPSRouteName(443, "1", "gateway-1", "gateway"), GatewayHTTPSRouteName(443, "1", "gateway-2", "gateway")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := rdsOut(t, gentest.Snapshot(t, map[string]string{"c1": tc.yaml}), tc.key)
			routes := gentest.Names(out.Resources[typeurl.Route])
			if !slices.Equal(routes, tc.want) {
				t.Errorf("route configurations %v, want %v", routes, tc.want)
			}
			var referred []string
			for _, r := range out.Resources[typeurl.Listener] {
				for _, fc := range r.Message.(*listenerv3.Listener).GetFilterChains() {
					if f := fc.GetFilters(); len(f) > 0 && f[len(f)-1].GetName() == build.HTTPConnectionManagerFilter {
						name, _ := rdsName(t, &listenerv3.FilterChain{Filters: f[len(f)-1:]})
						referred = append(referred, name)
					}
				}
			}
			slices.Sort(referred)
			if !slices.Equal(slices.Compact(referred), routes) {
				t.Errorf("listeners refer to %v, RDS sends %v", referred, routes)
			}
		})
	}
}
