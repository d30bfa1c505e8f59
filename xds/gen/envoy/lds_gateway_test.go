package envoy

import (
	"testing"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// TestGatewayListenPortNamesListenerAndRoutes: a gateway whose Service maps
// port 80 to 8080 listens on 8080, and the listener and the route
// configuration agree on the name http.8080.
func TestGatewayListenPortNamesListenerAndRoutes(t *testing.T) {
	snap := gentest.Snapshot(t, map[string]string{"c1": gentest.Mesh + `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ingressgateway, namespace: istio-system}
spec:
  hosts: [ingressgateway.istio-system.svc.cluster.local]
  ports: [{number: 80, name: http, protocol: HTTP, targetPort: 8080}]
  resolution: STATIC
  endpoints: [{address: 10.3.0.1}]
`})
	key := proxy.Key{Type: proxy.Router, Mesh: "m", Namespace: "istio-system", Labels: "istio=ingressgateway", IPs: "10.3.0.1",
		Locality: mesh.ParseLocality("us-east/a")} // the golden files' ingress gateway
	out := generate(snap, key)
	if gentest.ByName(out, typeurl.Listener, OutboundListenerName("0.0.0.0", 8080)).Message == nil {
		t.Fatalf("no listener on 8080: %v", gentest.Names(out.Resources[typeurl.Listener]))
	}
	if gentest.ByName(out, typeurl.Route, GatewayHTTPRouteName(8080)).Message == nil {
		t.Fatalf("no route configuration %s: %v", GatewayHTTPRouteName(8080), gentest.Names(out.Resources[typeurl.Route]))
	}
}
