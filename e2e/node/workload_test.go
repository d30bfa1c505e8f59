package node

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/navemesh/nave/internal/kubenode"
)

// demoApps are the demo's echo backends (v1, v2) and client in namespace demo, labelled for
// injection, every pod with the grpc-agent template: the backends with a gRPC readiness and a
// TCP liveness probe (both rewritten to the agent), the client calling the echo Service through
// the xDS resolver with the header the VirtualService routes to v2.
const demoApps = `apiVersion: v1
kind: Namespace
metadata:
  name: demo
  labels: {istio-injection: enabled}
---
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: demo}
spec:
  selector: {app: echo}
  ports:
  - {name: grpc, port: 7070, targetPort: 7070}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: demo}
spec:
  host: echo.demo.svc.cluster.local
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: demo}
spec:
  hosts: [echo.demo.svc.cluster.local]
  http:
  - name: beta-users
    match:
    - headers:
        x-user: {exact: beta}
    route:
    - destination: {host: echo.demo.svc.cluster.local, subset: v2}
  - name: default
    route:
    - destination: {host: echo.demo.svc.cluster.local, subset: v1}
{{backends}}`

const demoBackend = `---
apiVersion: apps/v1
kind: Deployment
metadata: {name: echo-{{v}}, namespace: demo}
spec:
  replicas: 1
  selector:
    matchLabels: {app: echo, version: {{v}}}
  template:
    metadata:
      labels: {app: echo, version: {{v}}}
      annotations: {inject.istio.io/templates: grpc-agent}
    spec:
      containers:
      - name: echo
        image: nave-demo-backend:dev
        imagePullPolicy: Never
        args: [--listen, "0.0.0.0:7070", --name, echo-{{v}}]
        ports:
        - {name: grpc, containerPort: 7070}
        readinessProbe:
          grpc: {port: 7070}
          periodSeconds: 1
        livenessProbe:
          tcpSocket: {port: grpc}
          periodSeconds: 1
`

const demoClient = `apiVersion: v1
kind: Pod
metadata:
  name: client
  namespace: demo
  labels: {app: client}
  annotations: {inject.istio.io/templates: grpc-agent}
spec:
  containers:
  - name: client
    image: nave-demo-client:dev
    imagePullPolicy: Never
    args: [--target, "xds:///echo.demo.svc.cluster.local:7070", --json, --interval, 100ms, --header, x-user=beta]
`

// call is one line of nave-demo-client --json.
type call struct {
	Seq     int    `json:"seq"`
	Time    string `json:"time"`
	Backend string `json:"backend"`
	Code    string `json:"code"`
	Error   string `json:"error"`
}

// testProxylessWorkloads: in a namespace labelled for injection, the demo's backends and client
// run in pods the spoke injected with the grpc-agent template (the agent fetched their
// certificates from the spoke's registration authority with the pod's projected token and wrote
// grpc's bootstrap). The kubelet's gRPC and TCP probes, rewritten to the agent, make the
// backends Ready; the client's xDS client, over mTLS to the hub (xds.nave.example.com, the
// agent's certificate), gets the echo Service and the VirtualService applied with kubectl, and
// its calls reach echo-v2 only, as the VirtualService routes its header. The calls to the
// backends themselves are plaintext gRPC: the demo backend is not an xDS server.
func testProxylessWorkloads(t *testing.T, n *kubenode.Node, _ *install) {
	ctx := stepContext(t)
	backends := strings.ReplaceAll(demoBackend, "{{v}}", "v1") + strings.ReplaceAll(demoBackend, "{{v}}", "v2")
	apply(ctx, t, n, strings.Replace(demoApps, "{{backends}}", backends, 1))
	for _, v := range []string{"v1", "v2"} {
		pods := deploymentReady(ctx, t, n, "demo", "echo-"+v)
		checkInjected(t, &pods[0], "grpc-agent")
		for _, c := range pods[0].Spec.Containers {
			if c.Name == "echo" && (c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Port.IntValue() != 15021) {
				t.Errorf("echo-%s's readiness probe was not rewritten to the agent: %+v", v, c.ReadinessProbe)
			}
		}
	}

	apply(ctx, t, n, demoClient)
	created := waitPodReady(ctx, t, n, "demo", "client")
	checkInjected(t, created, "grpc-agent")
	var first *call
	var seen []call
	until(ctx, t, n, "the client's first call answered", func() (bool, string, error) {
		calls, err := clientCalls(ctx, n)
		if err != nil {
			return false, err.Error(), nil
		}
		seen = calls
		for i, c := range calls {
			if c.Code == "OK" {
				first = &calls[i]
				return true, "", nil
			}
		}
		last := "no calls yet"
		if len(calls) > 0 {
			last = fmt.Sprintf("%+v", calls[len(calls)-1])
		}
		return false, last, nil
	})
	at, err := time.Parse(time.RFC3339Nano, first.Time)
	if err == nil {
		t.Logf("pod creation to the injected proxyless app's first successful call: %v (call %d)",
			at.Sub(created.CreationTimestamp.Time).Round(time.Millisecond), first.Seq)
	}
	// Every call answered after the first goes where the VirtualService sends x-user=beta.
	until(ctx, t, n, "ten more calls answered", func() (bool, string, error) {
		calls, err := clientCalls(ctx, n)
		if err != nil {
			return false, err.Error(), nil
		}
		seen = calls
		ok := 0
		for _, c := range calls {
			if c.Code == "OK" && c.Seq > first.Seq {
				ok++
			}
		}
		return ok >= 10, fmt.Sprintf("%d answered", ok), nil
	})
	for _, c := range seen {
		if c.Code == "OK" && c.Backend != "echo-v2" {
			t.Errorf("call %d answered by %q; the VirtualService routes x-user=beta to v2 (echo-v2)", c.Seq, c.Backend)
		}
	}
	if out := kubectl(ctx, t, n, "-n", "demo", "logs", "client", "-c", "client"); !strings.Contains(out, `"backend":"echo-v2"`) {
		t.Errorf("kubectl logs of the client shows no call answered by echo-v2:\n%s", out)
	}
	agentNumbers(ctx, t, n, created)
	// A backend's agent also answers the kubelet's two probes every second.
	echoPods, err := n.Client.CoreV1().Pods("demo").List(ctx, metav1.ListOptions{LabelSelector: "app=echo,version=v2"})
	if err != nil || len(echoPods.Items) == 0 {
		t.Fatalf("the echo-v2 pods: %v", err)
	}
	agentNumbers(ctx, t, n, &echoPods.Items[0])
}

// clientCalls reads the demo client's calls from its log on the node (kubectl logs says the
// same, checked once at the end: a kubectl process per poll would be costly).
func clientCalls(_ context.Context, n *kubenode.Node) ([]call, error) {
	return podCalls(n, "demo", "client")
}

// parseCalls reads the calls of nave-demo-client --json from its output.
func parseCalls(out string) []call {
	var calls []call
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var c call
		if json.Unmarshal(sc.Bytes(), &c) == nil && c.Seq > 0 {
			calls = append(calls, c)
		}
	}
	return calls
}

// checkInjected checks the pod carries the template's agent: the nave-proxy native sidecar
// and the injection status annotation.
func checkInjected(t *testing.T, p *corev1.Pod, template string) {
	t.Helper()
	if !strings.Contains(p.Annotations["sidecar.istio.io/status"], template) {
		t.Errorf("pod %s/%s: sidecar.istio.io/status %q; want the %s template", p.Namespace, p.Name, p.Annotations["sidecar.istio.io/status"], template)
	}
	for _, c := range p.Spec.InitContainers {
		if c.Name == "nave-proxy" {
			return
		}
	}
	t.Errorf("pod %s/%s has no nave-proxy init container", p.Namespace, p.Name)
}

// agentNumbers logs the memory the agent in pod uses (resident set, from /proc) and the CPU
// time it has spent, kubelet probes included, per second of its life.
func agentNumbers(ctx context.Context, t *testing.T, n *kubenode.Node, pod *corev1.Pod) {
	p, err := n.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cs := range p.Status.InitContainerStatuses {
		if cs.Name != "nave-proxy" || cs.State.Running == nil {
			continue
		}
		pid, err := n.ContainerPID(ctx, strings.TrimPrefix(cs.ContainerID, "containerd://"))
		if err != nil {
			t.Fatal(err)
		}
		status, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
		rss := ""
		for _, line := range strings.Split(string(status), "\n") {
			if strings.HasPrefix(line, "VmRSS:") {
				rss = strings.TrimSpace(strings.TrimPrefix(line, "VmRSS:"))
			}
		}
		cpu := cpuTime(pid)
		life := time.Since(cs.State.Running.StartedAt.Time)
		t.Logf("agent in pod %s/%s: RSS %s, CPU %v over %v (%.2f%% of a core)", p.Namespace, p.Name, rss,
			cpu.Round(time.Millisecond), life.Round(time.Second), 100*cpu.Seconds()/life.Seconds())
		return
	}
	t.Errorf("pod %s/%s: no running nave-proxy container", p.Namespace, p.Name)
}

// cpuTime is the user and system CPU time of process pid (/proc/PID/stat, in clock ticks of
// 1/100 s on Linux).
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0
	}
	u, _ := strconv.Atoi(fields[11])
	st, _ := strconv.Atoi(fields[12])
	return time.Duration(u+st) * 10 * time.Millisecond
}

// apply applies manifests with kubectl apply -f, server-side.
func apply(ctx context.Context, t *testing.T, n *kubenode.Node, manifests string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "manifests.yaml")
	if err := os.WriteFile(f, []byte(manifests), 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl(ctx, t, n, "apply", "--server-side", "-f", f)
}
