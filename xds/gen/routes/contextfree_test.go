package routes_test

import (
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/gen/routes"
	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/proxy"
)

// contextMesh: a gateway serving the same hosts on HTTP 80 and HTTPS
// 443, a one-port and a two-port service, and VirtualServices whose
// routes do and do not depend on the port or gateway they are served on.
const contextMesh = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: one, namespace: gw}
spec:
  hosts: [one.example]
  ports: [{number: 8080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.1}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: two, namespace: gw}
spec:
  hosts: [two.example]
  ports: [{number: 80, name: http, protocol: HTTP}, {number: 443, name: http2, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.2}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: self, namespace: gw}
spec:
  hosts: [self.example]
  ports: [{number: 80, name: http, protocol: HTTP}, {number: 443, name: https, protocol: HTTPS}]
  resolution: STATIC
  endpoints: [{address: 10.9.0.1, labels: {app: gw}}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: gw}
spec:
  selector: {app: gw}
  servers:
  - {port: {number: 80, name: http, protocol: HTTP}, hosts: ["*.example"]}
  - {port: {number: 443, name: https, protocol: HTTPS}, hosts: ["*.example"], tls: {mode: ISTIO_MUTUAL}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: free, namespace: gw}
spec:
  hosts: [a.example]
  gateways: [gw]
  http: [{route: [{destination: {host: one.example}}], mirror: {host: two.example, port: {number: 80}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: by-port, namespace: gw}
spec:
  hosts: [b.example]
  gateways: [gw]
  http: [{route: [{destination: {host: two.example}}]}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: match-port, namespace: gw}
spec:
  hosts: [c.example]
  gateways: [gw]
  http: [{match: [{port: 80, uri: {prefix: /only80}}], route: [{destination: {host: one.example}}]}, {route: [{destination: {host: one.example}}]}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: match-gateway, namespace: gw}
spec:
  hosts: [d.example]
  gateways: [gw]
  http: [{match: [{gateways: [gw]}], route: [{destination: {host: one.example}}]}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: mirror-by-port, namespace: gw}
spec:
  hosts: [e.example]
  gateways: [gw]
  http: [{route: [{destination: {host: one.example}}], mirror: {host: two.example}}]
`

var contextKey = proxy.Key{Type: proxy.Router, Mesh: "m", Namespace: "gw", Labels: "app=gw", IPs: "10.9.0.1", SDSCluster: "sds-grpc"}

// TestContextFree: a VirtualService is context-free only when no match
// names a port or gateways and every destination's port is known without
// the context's.
func TestContextFree(t *testing.T) {
	snap := gentest.Snapshot(t, map[string]string{"c1": contextMesh})
	v := scope.New(snap, contextKey)
	tr := routes.ForEnvoy(v)
	want := map[string]bool{"free": true, "by-port": false, "match-port": false, "match-gateway": false, "mirror-by-port": false}
	for _, c := range snap.AllVirtualServices {
		if got := tr.ContextFree(c); got != want[c.Object.Name] {
			t.Errorf("%s: ContextFree = %t, want %t", c.Object.Name, got, want[c.Object.Name])
		}
	}
}

// TestGatewayRoutesSharedAcrossPorts: the HTTP and HTTPS route
// configurations of one gateway share the routes of a context-free
// VirtualService (one translation) and get their own of one whose routes
// depend on the port (its destination's port follows the server's).
func TestGatewayRoutesSharedAcrossPorts(t *testing.T) {
	snap := gentest.Snapshot(t, map[string]string{"c1": contextMesh})
	out := gen.Envoy(snap, contextKey)
	vhost := func(port, host string) *routev3.VirtualHost {
		for _, r := range out.Resources[typeurl.Route] {
			if (port == "80" && r.Name == "http.80") || (port == "443" && r.Name != "http.80") {
				for _, vh := range r.Message.(*routev3.RouteConfiguration).GetVirtualHosts() {
					if vh.GetName() == host+":"+port {
						return vh
					}
				}
			}
		}
		t.Fatalf("no virtual host %s:%s in %v", host, port, gentest.Names(out.Resources[typeurl.Route]))
		return nil
	}
	if a, b := vhost("80", "a.example").GetRoutes(), vhost("443", "a.example").GetRoutes(); len(a) != 1 || a[0] != b[0] {
		t.Errorf("a.example: the route is not shared between ports 80 and 443")
	}
	cluster := func(port string) string {
		return vhost(port, "b.example").GetRoutes()[0].GetRoute().GetCluster()
	}
	if c80, c443 := cluster("80"), cluster("443"); c80 != "outbound|80||two.example" || c443 != "outbound|443||two.example" {
		t.Errorf("b.example: clusters %s on 80 and %s on 443, want each port's own", c80, c443)
	}
	if n80, n443 := len(vhost("80", "c.example").GetRoutes()), len(vhost("443", "c.example").GetRoutes()); n80 != 2 || n443 != 1 {
		t.Errorf("c.example: %d routes on 80 and %d on 443, want 2 and 1", n80, n443)
	}
}
