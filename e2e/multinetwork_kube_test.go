package e2e

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/navemesh/nave/shared/typeurl"
)

// multiNetworkKube is cluster east's (network net-b, the spoke's
// network): ratings with two pods, none labelled with a network, and the
// network's east-west gateway Service as deploy/eastwest-gateway makes it
// (a LoadBalancer labelled topology.istio.io/network, port 15443).
const multiNetworkKube = `apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: v1
kind: Service
metadata: {name: ratings, namespace: shop}
spec:
  selector: {app: ratings}
  ports: [{name: http, port: 9080}]
---
apiVersion: v1
kind: Pod
metadata: {name: ratings-1, namespace: shop, labels: {app: ratings, security.istio.io/tlsMode: istio}}
spec: {containers: [{name: ratings, image: ratings}]}
---
apiVersion: v1
kind: Pod
metadata: {name: ratings-2, namespace: shop, labels: {app: ratings, security.istio.io/tlsMode: istio}}
spec: {containers: [{name: ratings, image: ratings}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: ratings-x, namespace: shop, labels: {kubernetes.io/service-name: ratings}}
addressType: IPv4
ports: [{name: http, port: 9080, protocol: TCP}]
endpoints:
- {addresses: [10.2.1.1], conditions: {ready: true}, targetRef: {kind: Pod, namespace: shop, name: ratings-1}}
- {addresses: [10.2.1.2], conditions: {ready: true}, targetRef: {kind: Pod, namespace: shop, name: ratings-2}}
---
apiVersion: v1
kind: Namespace
metadata: {name: nave-eastwest}
---
apiVersion: v1
kind: Service
metadata:
  name: eastwest-gateway
  namespace: nave-eastwest
  labels: {topology.istio.io/network: net-b, networking.istio.io/gatewayPort: "15443"}
spec:
  type: LoadBalancer
  selector: {app: eastwest-gateway}
  ports: [{name: tls, port: 15443}]
`

// multiNetworkFiles is cluster west's (network net-a, the spoke's
// network): ratings' endpoint, which names no network.
const multiNetworkFiles = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ratings-west, namespace: shop}
spec:
  hosts: [ratings.shop.svc.cluster.local]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 9080, name: http, protocol: HTTP}]
  endpoints:
  - {address: 10.1.1.1, labels: {security.istio.io/tlsMode: istio}}
`

// TestMultiNetworkKubernetesSpoke runs the real hub, a Kubernetes spoke
// on network net-b (its --network) and a file spoke on net-a. The east-
// west gateway's load balancer address, written to the Service's status
// subresource, is the gateway of net-b: a sidecar on net-a receives
// ratings' net-a endpoint directly and net-b's two pods through that
// address (weight 2); a sidecar on net-b receives its own network's pods
// directly and nothing of net-a (no gateway). The load balancer's address
// changing, and nothing else, moves the gateway in net-a's EDS.
func TestMultiNetworkKubernetesSpoke(t *testing.T) {
	kc := kubeCluster(t)
	kc.Apply(t, []byte(multiNetworkKube))
	cs := kubernetes.NewForConfigOrDie(kc.Admin)
	setIngress := func(ip string) {
		t.Helper()
		svc, err := cs.CoreV1().Services("nave-eastwest").Get(t.Context(), "eastwest-gateway", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
		if _, err := cs.CoreV1().Services("nave-eastwest").UpdateStatus(t.Context(), svc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setIngress("192.0.2.7")

	h := newHub(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "config.yaml"), multiNetworkFiles)
	newSpoke(t, h, "west", dir, "--network", "net-a")
	newKubeSpoke(t, h, "east", kc, "--network", "net-b")
	waitOneMesh(t, h, 2)

	const cluster = "outbound|9080||ratings.shop.svc.cluster.local"
	sidecar := func(network, ip string) *adsClient {
		t.Helper()
		conn, err := grpc.NewClient(addr(h.xds), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		md, _ := structpb.NewStruct(map[string]any{"MESH": "default", "NAMESPACE": "shop", "NETWORK": network, "LABELS": map[string]any{"app": "web"}})
		c := adsOn(t, conn, &corev3.Node{Id: "sidecar~" + ip + "~web-" + network + ".shop~shop.svc.cluster.local", Metadata: md})
		c.fetch(t, typeurl.Cluster)
		return c
	}
	// waitEDS waits for c's assignment of ratings to be want: the one it
	// holds (got), else one of the next it receives.
	waitEDS := func(c *adsClient, who string, got []string, want ...string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !slices.Equal(got, want) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: EDS %v, want %v", who, got, want)
			}
			if m, ok := c.next(t, typeurl.Endpoint, time.Until(deadline))[cluster]; ok {
				got = assignmentLayout(m)
			}
		}
	}
	first := func(c *adsClient) []string {
		t.Helper()
		if m, ok := c.fetch(t, typeurl.Endpoint, cluster)[cluster]; ok {
			return assignmentLayout(m)
		}
		return nil
	}
	onA, onB := sidecar("net-a", "10.1.9.9"), sidecar("net-b", "10.2.9.9")
	waitEDS(onA, "sidecar on net-a", first(onA), "10.1.1.1:9080/1", "192.0.2.7:15443/2")
	waitEDS(onB, "sidecar on net-b", first(onB), "10.2.1.1:9080/1", "10.2.1.2:9080/1")

	// Only the load balancer's status changes: the gateway moves.
	setIngress("192.0.2.8")
	waitEDS(onA, "sidecar on net-a after the load balancer moved", nil, "10.1.1.1:9080/1", "192.0.2.8:15443/2")
}
