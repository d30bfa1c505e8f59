package e2e

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/internal/kubetest"
	"github.com/navemesh/nave/internal/testwait"
)

// newKubeSpoke starts a spoke process watching c as the nave-spoke
// service account, with the extra flags given.
func newKubeSpoke(t *testing.T, h *hub, cluster string, c *kubetest.Cluster, extra ...string) *spoke {
	s := &spoke{admin: harness.FreePort(t)}
	s.proc = harness.Start(t, "spoke-"+cluster, binary("nave-spoke"), append([]string{
		"--source", "kubernetes", "--kubernetes.kubeconfig", c.Kubeconfig(t, spokeIdentity, "system:serviceaccounts"),
		"--cluster", cluster, "--hub.address", addr(h.spokes), "--hub.plaintext", "--hub.state-dir", t.TempDir(), "--admin.listen", addr(s.admin),
		"--hub.backoff-initial", "100ms", "--hub.backoff-max", "1s", "--log.level", "debug"}, extra...)...)
	harness.WaitReady(t, s.url("/healthz/ready"), 60*time.Second)
	return s
}

// nsBackend is a nave-demo-backend process in a network namespace the
// test created: Kubernetes refuses loopback endpoint addresses, so the
// workloads get a real address that still never leaves the machine.
func nsBackend(t *testing.T, ns *harness.NetNS, name string, port int) *backend {
	t.Helper()
	ns.Start(t, name, binary("nave-demo-backend"),
		"--listen", fmt.Sprintf("%s:%d", ns.NSIP, port), "--name", name)
	testwait.For(t, 10*time.Second, func() error {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("%s:%d", ns.NSIP, port), time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
	return &backend{name: name, port: port}
}

func TestKubernetesSpoke(t *testing.T) {
	ns := harness.NewNetNS(t)
	backends := []*backend{nsBackend(t, ns, "echo-v1", 17071), nsBackend(t, ns, "echo-v2", 17072), nsBackend(t, ns, "echo-v3", 17073)}
	ip := ns.NSIP
	kc := kubeCluster(t)
	kc.Apply(t, []byte(node("node-a", "us-east", "zone-a")), []byte(node("node-b", "us-east", "zone-b")), []byte(echoService))
	kc.Apply(t, []byte(podWithSlice("echo-v1", "v1", "node-a", ip, backends[0].port, true, false)),
		[]byte(podWithSlice("echo-v2", "v2", "node-b", ip, backends[1].port, true, false)))

	h := newHub(t)
	sp := newKubeSpoke(t, h, "cluster-a", kc)
	p1, p2, p3 := backends[0].port, backends[1].port, backends[2].port

	t.Run("services and workloads reach the hub with locality", func(t *testing.T) {
		waitEndpoints(t, h, echoHost,
			fmt.Sprintf("cluster-a/v1/%d/healthy/us-east/zone-a", p1),
			fmt.Sprintf("cluster-a/v2/%d/healthy/us-east/zone-b", p2))
	})

	t.Run("scale up, terminating, scale down", func(t *testing.T) {
		kc.Apply(t, []byte(podWithSlice("echo-v3", "v3", "node-a", ip, p3, true, false)))
		waitEndpoints(t, h, echoHost,
			fmt.Sprintf("cluster-a/v1/%d/healthy/us-east/zone-a", p1),
			fmt.Sprintf("cluster-a/v2/%d/healthy/us-east/zone-b", p2),
			fmt.Sprintf("cluster-a/v3/%d/healthy/us-east/zone-a", p3))
		kc.Apply(t, []byte(podWithSlice("echo-v3", "v3", "node-a", ip, p3, false, true)))
		waitEndpoints(t, h, echoHost,
			fmt.Sprintf("cluster-a/v1/%d/healthy/us-east/zone-a", p1),
			fmt.Sprintf("cluster-a/v2/%d/healthy/us-east/zone-b", p2),
			fmt.Sprintf("cluster-a/v3/%d/terminating/us-east/zone-a", p3))
		cs := kubernetes.NewForConfigOrDie(kc.Admin)
		ctx := context.Background()
		if err := cs.DiscoveryV1().EndpointSlices("demo").Delete(ctx, "echo-echo-v3", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cs.CoreV1().Pods("demo").Delete(ctx, "echo-v3", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		waitEndpoints(t, h, echoHost,
			fmt.Sprintf("cluster-a/v1/%d/healthy/us-east/zone-a", p1),
			fmt.Sprintf("cluster-a/v2/%d/healthy/us-east/zone-b", p2))
	})

	t.Run("routing applied through the API server", func(t *testing.T) {
		kc.Apply(t, []byte(`apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: demo}
spec:
  host: echo
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
`), []byte(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: demo}
spec:
  hosts: [echo]
  http:
  - match: [{headers: {x-user: {exact: beta}}}]
    route: [{destination: {host: echo, subset: v2}}]
  - route:
    - {destination: {host: echo, subset: v1}, weight: 70}
    - {destination: {host: echo, subset: v2}, weight: 30}
`))
		target := "xds:///" + echoHost + ":7070"
		plain := startClient(t, h, target, "kube-plain.demo")
		beta := startClient(t, h, target, "kube-beta.demo", "--header", "x-user=beta")
		// The VirtualService is in force once every recent beta call lands
		// on v2 (before it, traffic is round robin over both).
		firstOK(t, plain, 30*time.Second)
		testwait.For(t, 30*time.Second, func() error {
			calls := beta.calls()
			if len(calls) < 20 {
				return fmt.Errorf("%d beta calls", len(calls))
			}
			last := calls[len(calls)-20:]
			if got := tally(last); got["echo-v2"] != 20 {
				return fmt.Errorf("last beta calls: %s", describe(got))
			}
			return nil
		})
		// The plain client has ACKed the same routes as the beta one.
		testwait.For(t, 30*time.Second, func() error {
			pv, err1 := routeVersion(h, "kube-plain.demo")
			bv, err2 := routeVersion(h, "kube-beta.demo")
			if err1 != nil || err2 != nil || pv != bv {
				return fmt.Errorf("route versions %q vs %q (%v, %v)", pv, bv, err1, err2)
			}
			return nil
		})
		assertSplit(t, plain.collect(t, time.Now(), 600, 30*time.Second), "echo-v1", "echo-v2", 0.7)
	})

	t.Run("metrics are documented", func(t *testing.T) {
		assertMetricsDocumented(t, sp.url("/metrics"), h.url("/metrics"))
	})
}

// TestTwoClustersOneService runs two API servers (two clusters), each with
// a spoke, feeding one hub: the service that exists in both gets the
// endpoints of both, labelled by cluster and locality, and the client
// reaches both.
func TestTwoClustersOneService(t *testing.T) {
	ns := harness.NewNetNS(t)
	ba, bb := nsBackend(t, ns, "echo-a", 17081), nsBackend(t, ns, "echo-b", 17082)
	ka, kb := kubeCluster(t), kubeCluster(t)
	ka.Apply(t, []byte(node("node-a", "eu-west", "zone-1")), []byte(echoService), []byte(podWithSlice("echo-a", "v1", "node-a", ns.NSIP, ba.port, true, false)))
	kb.Apply(t, []byte(node("node-b", "us-east", "zone-2")), []byte(echoService), []byte(podWithSlice("echo-b", "v1", "node-b", ns.NSIP, bb.port, true, false)))

	h := newHub(t)
	newKubeSpoke(t, h, "cluster-a", ka)
	newKubeSpoke(t, h, "cluster-b", kb)
	waitEndpoints(t, h, echoHost,
		fmt.Sprintf("cluster-a/v1/%d/healthy/eu-west/zone-1", ba.port),
		fmt.Sprintf("cluster-b/v1/%d/healthy/us-east/zone-2", bb.port))

	c := startClient(t, h, "xds:///"+echoHost+":7070", "two-clusters.demo")
	got := tally(c.collect(t, firstOK(t, c, 30*time.Second), 200, 30*time.Second))
	if got["echo-a"] == 0 || got["echo-b"] == 0 || got["echo-a"]+got["echo-b"] != 200 {
		t.Fatalf("calls across the two clusters: %s, want both backends and no errors", describe(got))
	}
	t.Logf("calls across two clusters: %s", describe(got))
}
