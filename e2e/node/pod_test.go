package node

import (
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/navemesh/nave/internal/kubenode"
)

// echoPod is a pod running the demo backend on 8080 with a gRPC readiness probe; image is
// the container's image.
func echoPod(name, image string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:            "echo",
			Image:           image,
			ImagePullPolicy: corev1.PullNever,
			Args:            []string{"--listen", "0.0.0.0:8080", "--name", name},
			Ports:           []corev1.ContainerPort{{Name: "grpc", ContainerPort: 8080}},
			ReadinessProbe: &corev1.Probe{
				ProbeHandler:  corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 8080}},
				PeriodSeconds: 1,
			},
		}}},
	}
}

// testRunsAPod: the node runs a pod of an image built by internal/imagebuild in the pod
// sandbox nave-pause, the kubelet's gRPC readiness probe makes it Ready, it has an address of
// the pod network, and a gRPC call from the host reaches it there.
func testRunsAPod(t *testing.T, n *kubenode.Node, _ *install) {
	ctx := stepContext(t)
	newNamespace(ctx, t, n, "smoke", nil)
	if _, err := n.Client.CoreV1().Pods("smoke").Create(ctx, echoPod("echo", "nave-demo-backend:dev"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := waitPodReady(ctx, t, n, "smoke", "echo")
	_, cidr, _ := net.ParseCIDR(kubenode.PodCIDR)
	ip := net.ParseIP(pod.Status.PodIP)
	if ip == nil || !cidr.Contains(ip) {
		t.Fatalf("pod IP %q is not in the pod network %s", pod.Status.PodIP, kubenode.PodCIDR)
	}
	conn, err := grpc.NewClient(net.JoinHostPort(pod.Status.PodIP, "8080"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health check of the pod at %s: %v %v", pod.Status.PodIP, resp, err)
	}
	t.Logf("pod %s Ready at %s (sandbox %s)", pod.Name, pod.Status.PodIP, kubenode.SandboxImage)
}

// testImageNotLoaded: a pod naming an image that was never imported is not pulled (nothing
// can be), and its status says which image.
func testImageNotLoaded(t *testing.T, n *kubenode.Node, _ *install) {
	ctx := stepContext(t)
	newNamespace(ctx, t, n, "smoke", nil)
	if _, err := n.Client.CoreV1().Pods("smoke").Create(ctx, echoPod("missing", "nave-not-built:dev"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	until(ctx, t, n, "pod smoke/missing reports its image", func() (bool, string, error) {
		p, err := n.Client.CoreV1().Pods("smoke").Get(ctx, "missing", metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && w.Reason == "ErrImageNeverPull" {
				t.Logf("not loaded: %s: %s", w.Reason, w.Message)
				return true, "", nil
			}
		}
		return false, podState(p), nil
	})
}

// TestNode starts one node and runs the node tests on it in order, each on what the ones
// before proved; it stops at the first that fails.
func TestNode(t *testing.T) {
	n := startNode(t)
	in := &install{navectlBin: buildNavectl(t)}
	for _, tc := range []struct {
		name string
		run  func(*testing.T, *kubenode.Node, *install)
	}{
		{"RunsAPod", testRunsAPod},
		{"ImageNotLoaded", testImageNotLoaded},
		{"Install", testInstall},
		{"SpokeContainerKilled", testSpokeContainerKilled},
		{"ProxylessWorkloads", testProxylessWorkloads},
		{"HubPodReplaced", testHubPodReplaced},
		{"HubRollingUpdate", testHubRollingUpdate},
		{"AppMTLS", testAppMTLS},
		{"InjectionRefused", testInjectionRefused},
		{"SidecarCapture", testSidecarCapture},
		{"SpokeWithoutSecret", testSpokeWithoutSecret},
	} {
		if !t.Run(tc.name, func(t *testing.T) { tc.run(t, n, in) }) {
			break
		}
	}
}
