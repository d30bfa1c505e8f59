package node

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/navemesh/nave/internal/kubenode"
)

// restarts is the sum of the restart counts of the pod's containers.
func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, cs := range p.Status.ContainerStatuses {
		n += cs.RestartCount
	}
	return n
}

// refusedPod asks for both templates, which exclude each other: the injector refuses it.
const refusedPod = `apiVersion: v1
kind: Pod
metadata:
  name: refused
  namespace: demo
  annotations: {inject.istio.io/templates: "sidecar,grpc-agent"}
spec:
  containers:
  - name: echo
    image: nave-demo-backend:dev
    imagePullPolicy: Never
`

// refusedDeployment is the same pod as a Deployment's template: the Deployment is stored,
// its ReplicaSet's pods are refused.
const refusedDeployment = `apiVersion: apps/v1
kind: Deployment
metadata: {name: refused, namespace: demo}
spec:
  replicas: 1
  selector:
    matchLabels: {app: refused}
  template:
    metadata:
      labels: {app: refused}
      annotations: {inject.istio.io/templates: "sidecar,grpc-agent"}
    spec:
      containers:
      - name: echo
        image: nave-demo-backend:dev
        imagePullPolicy: Never
`

// refusedCause is what the injector says of refusedPod (spoke/inject): the field and why.
// kubectl apply prints it after "The request is invalid: " (the webhook's Status is Invalid
// with this field as its cause, and kubectl shows causes, not the message); the ReplicaSet's
// event has the API server's whole message (refusedMessage).
const refusedCause = `metadata.annotations[inject.istio.io/templates]: templates "sidecar" and "grpc-agent" exclude each other: choose one`

const refusedMessage = `denied the request: the sidecar injector refuses the pod: ` + refusedCause

// testInjectionRefused: a pod the injector cannot inject (two templates that exclude each
// other) is refused at admission, and kubectl shows why: kubectl apply of the pod fails with
// the injector's reason naming the annotation, and no pod is stored; as a Deployment's
// template, the Deployment is stored and its ReplicaSet's FailedCreate event, which kubectl
// shows, carries the webhook's denial with the same reason. Nothing else is affected: the spoke keeps running (no
// restart), and the demo client's calls made since are answered.
func testInjectionRefused(t *testing.T, n *kubenode.Node, _ *install) {
	ctx := stepContext(t)
	spoke := deploymentReady(ctx, t, n, "nave-system", "nave-spoke")[0]
	before, err := clientCalls(ctx, n)
	if err != nil {
		t.Fatal(err)
	}

	f := filepath.Join(t.TempDir(), "refused.yaml")
	if err := os.WriteFile(f, []byte(refusedPod), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := n.Kubectl(ctx, "apply", "-f", f)
	if err == nil {
		t.Fatalf("kubectl apply of a pod asking for two templates succeeded:\n%s", out)
	}
	if !strings.Contains(out, "The request is invalid: "+refusedCause) {
		t.Errorf("kubectl apply of the refused pod says:\n%s\nwant the injector's refusal %q", out, refusedCause)
	}
	t.Logf("kubectl apply of a pod the injector refuses: %s", strings.TrimSpace(out))
	if _, err := n.Client.CoreV1().Pods("demo").Get(ctx, "refused", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused pod: %v; want it not stored", err)
	}

	apply(ctx, t, n, refusedDeployment)
	var event string
	until(ctx, t, n, "the refused Deployment's ReplicaSet reports FailedCreate", func() (bool, string, error) {
		out, err := n.Kubectl(ctx, "-n", "demo", "get", "events", "--field-selector", "reason=FailedCreate", "-o", "custom-columns=OBJ:.involvedObject.name,MSG:.message", "--no-headers")
		if err != nil {
			return false, err.Error(), nil
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "refused-") && strings.Contains(line, refusedMessage) {
				event = line
				return true, "", nil
			}
		}
		return false, out, nil
	})
	t.Logf("kubectl get events: %s", event)
	if list, err := n.Client.CoreV1().Pods("demo").List(ctx, metav1.ListOptions{LabelSelector: "app=refused"}); err != nil || len(list.Items) > 0 {
		t.Errorf("pods of the refused Deployment: %v %v; want none", len(list.Items), err)
	}
	kubectl(ctx, t, n, "-n", "demo", "delete", "deployment", "refused")
	refused := time.Now()

	// Nothing else affected: the spoke has not restarted, and the demo client's later calls
	// are answered (a call after the refusals proves they are in its log).
	after := deploymentReady(ctx, t, n, "nave-system", "nave-spoke")[0]
	if after.Name != spoke.Name || restarts(&after) != restarts(&spoke) {
		t.Errorf("the spoke changed while refusing: pod %s (%d restarts), was %s (%d)", after.Name, restarts(&after), spoke.Name, restarts(&spoke))
	}
	until(ctx, t, n, "the demo client's calls after the refusals answered", func() (bool, string, error) {
		calls, err := clientCalls(ctx, n)
		if err != nil {
			return false, err.Error(), nil
		}
		later := 0
		for _, c := range calls[len(before):] {
			if c.Code != "OK" {
				return false, "", fmt.Errorf("the demo client's call %d failed: %s %s", c.Seq, c.Code, c.Error)
			}
			if at, err := time.Parse(time.RFC3339Nano, c.Time); err == nil && at.After(refused) {
				later++
			}
		}
		return later >= 3, fmt.Sprintf("%d calls answered after the refusals", later), nil
	})
}
