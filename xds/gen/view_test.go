package gen

import (
	"testing"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/gentest"
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
	key := goldenProxies[2].key // the ingress gateway at 10.3.0.1
	out := Envoy(snap, key)
	if _, ok := byNameOK(out, typeurl.Listener, OutboundListenerName("0.0.0.0", 8080)); !ok {
		t.Fatalf("no listener on 8080: %v", resourceNames(out, typeurl.Listener))
	}
	if _, ok := byNameOK(out, typeurl.Route, GatewayHTTPRouteName(8080)); !ok {
		t.Fatalf("no route configuration %s: %v", GatewayHTTPRouteName(8080), resourceNames(out, typeurl.Route))
	}
}

func byNameOK(out *Output, typeURL, name string) (Resource, bool) {
	for _, r := range out.Resources[typeURL] {
		if r.Name == name {
			return r, true
		}
	}
	return Resource{}, false
}

func resourceNames(out *Output, typeURL string) []string {
	var names []string
	for _, r := range out.Resources[typeURL] {
		names = append(names, r.Name)
	}
	return names
}
