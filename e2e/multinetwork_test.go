package e2e

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/mesh"
)

// multiNetworkC1 is cluster c1 (network net-a): one ratings endpoint on
// net-a, and one on net-c, a network without a gateway.
const multiNetworkC1 = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ratings-c1, namespace: shop}
spec:
  hosts: [ratings.shop.svc.cluster.local]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 9080, name: http, protocol: HTTP}]
  endpoints:
  - {address: 10.1.1.1, network: net-a, locality: us-east/a, labels: {security.istio.io/tlsMode: istio}}
  - {address: 10.3.1.1, network: net-c, locality: us-east/a, labels: {security.istio.io/tlsMode: istio}}
`

// multiNetworkC2 is cluster c2 (network net-b): two ratings endpoints and
// the network's east-west gateway at gatewayIP (a WorkloadEntry labelled
// as one) with its AUTO_PASSTHROUGH Gateway.
func multiNetworkC2(gatewayIP string) string {
	return `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ratings-c2, namespace: shop}
spec:
  hosts: [ratings.shop.svc.cluster.local]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 9080, name: http, protocol: HTTP}]
  endpoints:
  - {address: 10.2.1.1, network: net-b, locality: us-west/b, labels: {security.istio.io/tlsMode: istio}}
  - {address: 10.2.1.2, network: net-b, locality: us-west/b, labels: {security.istio.io/tlsMode: istio}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata:
  name: eastwestgateway
  namespace: istio-system
  labels: {topology.istio.io/network: net-b, networking.istio.io/gatewayPort: "15443", istio: eastwestgateway}
spec: {address: ` + gatewayIP + `, locality: us-west/b}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: cross-network-gateway, namespace: istio-system}
spec:
  selector: {istio: eastwestgateway}
  servers:
  - port: {number: 15443, name: tls, protocol: TLS}
    tls: {mode: AUTO_PASSTHROUGH}
    hosts: ["*.local"]
`
}

// assignmentLayout renders an assignment as sorted "address:port/weight"
// strings (the weight Envoy takes: unset is 1).
func assignmentLayout(m proto.Message) []string {
	var out []string
	for _, l := range m.(*endpointv3.ClusterLoadAssignment).GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			out = append(out, fmt.Sprintf("%s:%d/%d", sa.GetAddress(), sa.GetPortValue(), max(1, e.GetLoadBalancingWeight().GetValue())))
		}
	}
	slices.Sort(out)
	return out
}

// TestMultiNetworkSplitHorizon runs the real hub and two file spokes on
// two networks (multiNetworkSplitHorizon).
func TestMultiNetworkSplitHorizon(t *testing.T) {
	h := newHub(t)
	dir1, dir2 := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(dir1, "config.yaml"), multiNetworkC1)
	writeFile(t, filepath.Join(dir2, "config.yaml"), multiNetworkC2("192.0.2.1"))
	newSpoke(t, h, "c1", dir1)
	newSpoke(t, h, "c2", dir2)
	multiNetworkSplitHorizon(t, h, func(ip string) { writeFile(t, filepath.Join(dir2, "config.yaml"), multiNetworkC2(ip)) })
}

// TestMultiNetworkKubernetesGateway is TestMultiNetworkSplitHorizon with
// net-b's cluster read from a real Kubernetes API server: its ratings
// endpoints, gateway WorkloadEntry and Gateway are Kubernetes objects,
// and the gateway moves by an update of the WorkloadEntry.
func TestMultiNetworkKubernetesGateway(t *testing.T) {
	kc := kubeCluster(t)
	kc.Apply(t, []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: istio-system}\n"),
		[]byte(multiNetworkC2("192.0.2.1")))
	h := newHub(t)
	dir1 := t.TempDir()
	writeFile(t, filepath.Join(dir1, "config.yaml"), multiNetworkC1)
	newSpoke(t, h, "c1", dir1)
	newKubeSpoke(t, h, "c2", kc)
	multiNetworkSplitHorizon(t, h, func(ip string) { kc.Apply(t, []byte(multiNetworkC2(ip))) })
}

// multiNetworkSplitHorizon checks a hub whose clusters c1 (net-a,
// multiNetworkC1) and c2 (net-b, multiNetworkC2 with its gateway at
// 192.0.2.1) are coming. A sidecar on net-a receives ratings' net-a
// endpoint directly and net-b's two through net-b's gateway (weight 2);
// net-c's (no gateway) is left out and reported (metric, /debug/meshes).
// A proxyless client on net-a receives net-a's endpoint only. Moving the
// gateway's address (move) updates the sidecar's EDS through the
// endpoint fast path: no generation from scratch, and the incremental
// results equal generations from scratch.
func multiNetworkSplitHorizon(t *testing.T, h *hub, move func(ip string)) {
	t.Helper()
	waitOneMesh(t, h, 2)

	const cluster = "outbound|9080||ratings.shop.svc.cluster.local"
	conn, err := grpc.NewClient(addr(h.xds), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	md, _ := structpb.NewStruct(map[string]any{"MESH": "default", "NAMESPACE": "shop", "NETWORK": "net-a", "LABELS": map[string]any{"app": "web"}})
	sidecar := adsOn(t, conn, &corev3.Node{Id: "sidecar~10.1.9.9~web-1.shop~shop.svc.cluster.local", Metadata: md})
	sidecar.fetch(t, typeurl.Cluster)
	want := []string{"10.1.1.1:9080/1", "192.0.2.1:15443/2"}
	if got := assignmentLayout(sidecar.fetch(t, typeurl.Endpoint, cluster)[cluster]); !slices.Equal(got, want) {
		t.Fatalf("sidecar on net-a: EDS %v, want %v", got, want)
	}

	grpcConn, err := grpc.NewClient(addr(h.xds), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	proxyless := adsOn(t, grpcConn, grpcNode("grpc-client-1", map[string]string{"MESH": "default", "NAMESPACE": "shop", "NETWORK": "net-a"}))
	proxyless.fetch(t, typeurl.Cluster)
	if got := assignmentLayout(proxyless.fetch(t, typeurl.Endpoint, cluster)[cluster]); !slices.Equal(got, []string{"10.1.1.1:9080/1"}) {
		t.Errorf("proxyless client on net-a: EDS %v, want its own network's endpoint only", got)
	}

	// Reported: net-c has no gateway, net-b has one.
	testwait.For(t, 10*time.Second, func() error {
		body, err := httpGet(h.url("/metrics"))
		if err != nil {
			return err
		}
		for _, s := range []string{`nave_mesh_unreachable_endpoints{mesh="default",network="net-c"} 1`, `nave_mesh_unreachable_endpoints{mesh="default",network="net-b"} 0`} {
			if !strings.Contains(body, s) {
				return fmt.Errorf("hub metrics lack %s", s)
			}
		}
		return nil
	})
	var meshes []struct {
		Networks []mesh.NetworkStatus `json:"networks"`
	}
	if err := harness.GetJSON(h.url("/debug/meshes"), &meshes); err != nil {
		t.Fatal(err)
	}
	var nets []string
	for _, n := range meshes[0].Networks {
		var gws []string
		for _, gw := range n.Gateways {
			gws = append(gws, fmt.Sprintf("%s:%d", gw.Address, gw.Port))
		}
		nets = append(nets, fmt.Sprintf("%s gateways=%v endpoints=%d unreachable=%d", n.Network, gws, n.Endpoints, n.Unreachable))
	}
	wantNets := []string{"net-a gateways=[] endpoints=1 unreachable=1", "net-b gateways=[192.0.2.1:15443] endpoints=2 unreachable=0",
		"net-c gateways=[] endpoints=1 unreachable=1"}
	if !slices.Equal(nets, wantNets) {
		t.Errorf("/debug/meshes networks %q, want %q", nets, wantNets)
	}

	// The gateway moves: the sidecar's EDS follows, without a generation
	// from scratch.
	full := func() float64 {
		v, err := metric(h.url("/metrics"), `nave_proxy_generations_total{mode="full"}`)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := full()
	move("192.0.2.2")
	want = []string{"10.1.1.1:9080/1", "192.0.2.2:15443/2"}
	if got := assignmentLayout(sidecar.next(t, typeurl.Endpoint, 30*time.Second)[cluster]); !slices.Equal(got, want) {
		t.Fatalf("sidecar on net-a after the gateway moved: EDS %v, want %v", got, want)
	}
	if after := full(); after != before {
		t.Errorf("the gateway move generated from scratch %v times; want the endpoint fast path only", after-before)
	}
	// --push.verify-incremental regenerated every incremental result from
	// scratch: none differed.
	if v, err := metric(h.url("/metrics"), "nave_proxy_generation_mismatches_total"); err != nil || v != 0 {
		t.Errorf("nave_proxy_generation_mismatches_total = %v (%v), want 0", v, err)
	}
}
