package node

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/navemesh/nave/internal/kubenode"
)

const sidecarPod = `apiVersion: v1
kind: Pod
metadata:
  name: captured
  namespace: demo
  labels: {app: captured}
spec:
  containers:
  - name: echo
    image: nave-demo-backend:dev
    imagePullPolicy: Never
    args: [--listen, "0.0.0.0:7070", --name, captured]
`

// testSidecarCapture: a pod in the injection namespace without a template annotation gets the
// sidecar template; its nave-init container (nave-agent capture, as root with NET_ADMIN and
// NET_RAW, from make images' nave-proxy) runs iptables-restore in the pod's network namespace
// and exits 0, and the capture chains are there, read back with iptables-save inside that
// namespace. The proxy itself is a stand-in: no Envoy binary can be had here (the stand-in base's
// envoy starts and waits), so the pod is not expected to become Ready.
func testSidecarCapture(t *testing.T, n *kubenode.Node, _ *install) {
	ctx := stepContext(t)
	apply(ctx, t, n, sidecarPod)
	var uid string
	until(ctx, t, n, "nave-init of pod demo/captured done", func() (bool, string, error) {
		p, err := n.Client.CoreV1().Pods("demo").Get(ctx, "captured", metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		uid = string(p.UID)
		for _, cs := range p.Status.InitContainerStatuses {
			if cs.Name != "nave-init" {
				continue
			}
			if term := cs.State.Terminated; term != nil && term.ExitCode == 0 {
				return true, "", nil
			}
			if term := cs.LastTerminationState.Terminated; term != nil && term.ExitCode != 0 {
				log, _ := n.ContainerLog("demo", "captured", "nave-init")
				return false, "", fmt.Errorf("nave-init exited %d (%s): %s\n%s", term.ExitCode, term.Reason, term.Message, log)
			}
		}
		return false, podState(p), nil
	})
	p, err := n.Client.CoreV1().Pods("demo").Get(ctx, "captured", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkInjected(t, p, "sidecar")
	pid, err := n.SandboxPID(ctx, uid)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, "nsenter", "--net=/proc/"+strconv.Itoa(pid)+"/ns/net", "iptables-save", "-t", "nat").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables-save in the pod's network namespace: %v\n%s", err, out)
	}
	for _, want := range []string{":NAVE_INBOUND", ":NAVE_OUTPUT", ":NAVE_REDIRECT", "-A OUTPUT -p tcp -j NAVE_OUTPUT"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the pod's nat table lacks %q:\n%s", want, out)
		}
	}
	// The host's own table has none of them: the rules went to the pod.
	host, _ := exec.CommandContext(ctx, "iptables-save", "-t", "nat").CombinedOutput()
	if strings.Contains(string(host), "NAVE_REDIRECT") {
		t.Errorf("the host's nat table has the capture chains:\n%s", host)
	}
	t.Logf("capture rules in pod demo/captured's network namespace (%d lines of nat table)", strings.Count(string(out), "\n"))
}
