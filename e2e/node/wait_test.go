package node

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/navemesh/nave/internal/kubenode"
	"github.com/navemesh/nave/internal/testwait"
)

// until waits, with testwait.For, until check returns true, failing the test with what
// and the state check last described; an error from check fails the test at once.
func until(_ context.Context, t *testing.T, _ *kubenode.Node, what string, check func() (bool, string, error)) {
	t.Helper()
	testwait.For(t, timeout, func() error {
		done, state, err := check()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !done {
			return fmt.Errorf("%s (last: %s)", what, state)
		}
		return nil
	})
}

// newNamespace creates a namespace with labels and waits for its default ServiceAccount (the
// controller manager makes it; pods are refused until it exists).
func newNamespace(ctx context.Context, t *testing.T, n *kubenode.Node, name string, labels map[string]string) {
	t.Helper()
	_, err := n.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	until(ctx, t, n, "ServiceAccount "+name+"/default", func() (bool, string, error) {
		_, err := n.Client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err), nil
	})
}

// waitPodReady waits until the pod is Ready and returns it; a container that cannot start
// (a missing image, a crash) is reported as it is seen.
func waitPodReady(ctx context.Context, t *testing.T, n *kubenode.Node, ns, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	until(ctx, t, n, "pod "+ns+"/"+name+" Ready", func() (bool, string, error) {
		p, err := n.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		pod = p
		return podReady(p), podState(p), nil
	})
	return pod
}

// podReady reports the pod's Ready condition.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podState describes the pod's phase and each container's state, for a failure message.
func podState(p *corev1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase %s", p.Status.Phase)
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			fmt.Fprintf(&b, "; %s: %s", c.Type, c.Message)
		}
	}
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		fmt.Fprintf(&b, "; %s ready=%v restarts=%d", cs.Name, cs.Ready, cs.RestartCount)
		if w := cs.State.Waiting; w != nil {
			fmt.Fprintf(&b, " waiting %s: %s", w.Reason, w.Message)
		}
		if term := cs.State.Terminated; term != nil {
			fmt.Fprintf(&b, " terminated %s (exit %d): %s", term.Reason, term.ExitCode, term.Message)
		}
	}
	return b.String()
}
