package envoy

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"

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
