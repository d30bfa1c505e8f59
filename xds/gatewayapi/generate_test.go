package gatewayapi_test

import (
	"slices"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// TestGeneratedFromTheTranslation: the generators serve the translated
// objects as they serve written ones — a gateway pod of the Gateway's
// namespace gets a listener per programmed listener (not the one whose
// certificate is refused), a pod with the same label elsewhere gets
// none, and proxyless clients get the mesh route of the GRPCRoute (its
// header match first, then the weighted split), never a consumer route.
func TestGeneratedFromTheTranslation(t *testing.T) {
	s := mesh.Build("m", []mesh.ClusterInput{{Name: "c1", Synced: true, Objects: load(t, "testdata/translate.yaml")}})
	router := func(ns string) *gen.Output {
		return gen.Envoy(s, proxy.Key{Type: proxy.Router, Mesh: "m", Namespace: ns, Labels: "gateway.networking.k8s.io/gateway-name=edge", IPs: "10.3.0.1", SDSCluster: "sds-grpc"})
	}
	var ports []string
	for _, l := range router("infra").Resources[typeurl.Listener] {
		ports = append(ports, l.Name)
	}
	for _, want := range []string{"80", "443", "9443", "5432"} {
		if !slices.ContainsFunc(ports, func(n string) bool { return strings.HasSuffix(n, "_"+want) }) {
			t.Errorf("gateway listeners %v: none on port %s", ports, want)
		}
	}
	if slices.ContainsFunc(ports, func(n string) bool { return strings.HasSuffix(n, "_8443") }) {
		t.Errorf("gateway listeners %v: the listener whose certificate is refused is served", ports)
	}
	if other := router("apps").Resources[typeurl.Listener]; len(other) != 0 {
		t.Errorf("a pod of another namespace with the label gets listeners %v", other)
	}

	out := gen.GRPC(s)
	var rc *routev3.RouteConfiguration
	for _, r := range out.Resources[typeurl.Route] {
		if strings.HasPrefix(r.Name, "greeter.apps.svc.cluster.local:50051") {
			rc = r.Message.(*routev3.RouteConfiguration)
		}
	}
	if rc == nil {
		t.Fatalf("no proxyless route configuration for greeter: %v", out.Resources[typeurl.Route])
	}
	routes := rc.GetVirtualHosts()[0].GetRoutes()
	if len(routes) != 2 || len(routes[0].GetMatch().GetHeaders()) != 1 || routes[0].GetMatch().GetPath() != "/helloworld.Greeter/SayHello" ||
		len(routes[1].GetRoute().GetWeightedClusters().GetClusters()) != 2 {
		t.Fatalf("proxyless greeter routes %v: want the header/method match, then the 80/20 split", routes)
	}
}
