package ads_test

import (
	"slices"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/envoy"
)

const envoyMesh = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: reviews, namespace: shop}
spec:
  hosts: [reviews.shop.svc.cluster.local]
  ports: [{number: 9080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.1.0.1, labels: {version: v1}}, {address: 10.1.0.2, labels: {version: v2}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: shop}
spec:
  host: reviews
  subsets: [{name: v1, labels: {version: v1}}, {name: v2, labels: {version: v2}}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: public, namespace: shop}
spec:
  selector: {istio: ingressgateway}
  servers: [{port: {number: 8080, name: http, protocol: HTTP}, hosts: [shop.example.com]}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: public, namespace: shop}
spec:
  hosts: [shop.example.com]
  gateways: [public]
  http: [{route: [{destination: {host: reviews, subset: v2}}]}]
`

// envoyNodeNS is envoyNode with a NAMESPACE in the metadata.
func envoyNodeNS(id, ns string, labels map[string]string) *corev3.Node {
	n := envoyNode(id, labels)
	n.Metadata.Fields["NAMESPACE"] = structpb.NewStringValue(ns)
	return n
}

func envoyNode(id string, labels map[string]string) *corev3.Node {
	l := map[string]any{}
	for k, v := range labels {
		l[k] = v
	}
	md, _ := structpb.NewStruct(map[string]any{"MESH": "m", "LABELS": l})
	return &corev3.Node{Id: id, Metadata: md}
}

// resourcesOf decodes a response's resources into messages of type T.
func resourcesOf[T proto.Message](t *testing.T, r *discoveryv3.DiscoveryResponse, newT func() T) map[string]T {
	t.Helper()
	out := map[string]T{}
	for _, a := range r.GetResources() {
		m := newT()
		if err := a.UnmarshalTo(m); err != nil {
			t.Fatal(err)
		}
		if v, ok := any(m).(interface{ ValidateAll() error }); ok {
			if err := v.ValidateAll(); err != nil {
				t.Errorf("%s does not validate: %v", a.GetTypeUrl(), err)
			}
		}
		name := ""
		switch x := any(m).(type) {
		case *clusterv3.Cluster:
			name = x.GetName()
		case *listenerv3.Listener:
			name = x.GetName()
		case *routev3.RouteConfiguration:
			name = x.GetName()
		}
		out[name] = m
	}
	return out
}

// TestEnvoySidecarAndGatewayAreServed drives the ADS server as Envoy does —
// wildcard CDS and LDS, then RDS by the names the listeners carry — for a
// sidecar and a gateway, and checks each gets its own kind of config.
func TestEnvoySidecarAndGatewayAreServed(t *testing.T) {
	f := newFixture(t, nil)
	objs, errs := meshconfig.DecodeYAML([]byte(envoyMesh), "mesh.yaml")
	if len(errs) > 0 {
		t.Fatal(errs[0])
	}
	f.set(t, "m", synced("c1", objs))

	t.Run("sidecar", func(t *testing.T) {
		p := f.connect(t, envoyNode("sidecar~10.9.0.1~client-1.shop~shop.svc.cluster.local", map[string]string{"app": "client"}))
		p.Subscribe(typeurl.Cluster)
		cds := p.Next(typeurl.Cluster)
		clusters := resourcesOf(t, cds, func() *clusterv3.Cluster { return new(clusterv3.Cluster) })
		for _, want := range []string{"outbound|9080||reviews.shop.svc.cluster.local", "outbound|9080|v2|reviews.shop.svc.cluster.local"} {
			if _, ok := clusters[want]; !ok {
				t.Fatalf("CDS lacks %s: has %v", want, keys(clusters))
			}
		}
		p.ACK(cds)
		p.Subscribe(typeurl.Listener)
		lds := p.Next(typeurl.Listener)
		listeners := resourcesOf(t, lds, func() *listenerv3.Listener { return new(listenerv3.Listener) })
		if _, ok := listeners[envoy.VirtualOutboundListener]; !ok {
			t.Fatalf("LDS lacks %s: has %v", envoy.VirtualOutboundListener, keys(listeners))
		}
		rds := rdsNames(t, listeners)
		if !slices.Contains(rds, envoy.SidecarRouteName(9080)) {
			t.Fatalf("listeners name routes %v, want %s among them", rds, envoy.SidecarRouteName(9080))
		}
		p.ACK(lds)
		p.Subscribe(typeurl.Route, envoy.SidecarRouteName(9080))
		routes := resourcesOf(t, p.Next(typeurl.Route), func() *routev3.RouteConfiguration { return new(routev3.RouteConfiguration) })
		if len(routes[envoy.SidecarRouteName(9080)].GetVirtualHosts()) == 0 {
			t.Fatalf("route %s has no virtual hosts", envoy.SidecarRouteName(9080))
		}
	})

	t.Run("gateway", func(t *testing.T) {
		p := f.connect(t, envoyNode("router~10.9.0.2~ingress-1.shop~shop.svc.cluster.local", map[string]string{"istio": "ingressgateway"}))
		p.Subscribe(typeurl.Listener)
		listeners := resourcesOf(t, p.Next(typeurl.Listener), func() *listenerv3.Listener { return new(listenerv3.Listener) })
		if _, ok := listeners[envoy.VirtualOutboundListener]; ok {
			t.Fatal("a gateway got the sidecar's virtual outbound listener")
		}
		rds := rdsNames(t, listeners)
		if !slices.Contains(rds, envoy.GatewayHTTPRouteName(8080)) {
			t.Fatalf("gateway listeners name routes %v, want %s", rds, envoy.GatewayHTTPRouteName(8080))
		}
	})
}

// rdsNames lists the route configuration names the listeners' HTTP
// connection managers ask for.
func rdsNames(t testing.TB, listeners map[string]*listenerv3.Listener) []string {
	t.Helper()
	var out []string
	for _, l := range listeners {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				hcm := new(hcmv3.HttpConnectionManager)
				if f.GetTypedConfig().UnmarshalTo(hcm) == nil && hcm.GetRds() != nil {
					out = append(out, hcm.GetRds().GetRouteConfigName())
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

func keys[T any](m map[string]T) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
