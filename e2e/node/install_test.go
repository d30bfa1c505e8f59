package node

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/navemesh/nave/internal/kubenode"
	"github.com/navemesh/nave/internal/manifests"
)

// proxyImage is the spoke's inject.proxyImage in the tests: make images' nave-proxy on the
// stand-in Envoy base (writeStandInProxyBase), loaded into the node.
const proxyImage = "nave-proxy:dev"

// install is what testInstall leaves for the tests after it.
type install struct {
	navectlBin string // the navectl binary
	pin        string // the hub's CA pin
}

// overlay writes a kustomization in a new directory that takes deploy/<base> and names the
// images by their plain names (docs/install.md, loading the tarballs into the nodes instead of a
// registry), with more files and lines; it returns the directory.
func overlay(t *testing.T, base string, images []string, extra string, files map[string]string) string {
	t.Helper()
	root, err := manifests.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n")
	// kustomize takes no absolute path to a base: the way from the overlay to it
	rel, err := filepath.Rel(dir, filepath.Join(root, "deploy", base))
	if err != nil {
		t.Fatal(err)
	}
	b.WriteString("- " + rel + "\nimages:\n")
	for _, im := range images {
		b.WriteString("- name: registry.example.com/nave/" + im + "\n  newName: " + im + "\n  newTag: dev\n")
	}
	b.WriteString(extra)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// kubectl runs kubectl on the node's cluster and fails the test on an error.
func kubectl(ctx context.Context, t *testing.T, n *kubenode.Node, args ...string) string {
	t.Helper()
	out, err := n.Kubectl(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// navectl runs navectl with the admin kubeconfig on the hub's state and returns its output.
func (in *install) navectl(ctx context.Context, t *testing.T, n *kubenode.Node, args ...string) string {
	t.Helper()
	return in.run(ctx, t, append(args, "--state-store", "kubernetes", "--kubeconfig", n.Kubeconfig)...)
}

// run runs navectl with args and returns its output.
func (in *install) run(ctx context.Context, t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.CommandContext(ctx, in.navectlBin, args...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("navectl %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return strings.TrimSpace(string(out))
}

// deploymentReady waits until every replica of the Deployment is updated, Ready and available,
// and returns its pods.
func deploymentReady(ctx context.Context, t *testing.T, n *kubenode.Node, ns, name string) []corev1.Pod {
	t.Helper()
	return rolledOut(ctx, t, n, "Deployment", ns, name)
}

// statefulSetReady waits until every replica of the StatefulSet is of its update revision, Ready
// and available, and returns its pods.
func statefulSetReady(ctx context.Context, t *testing.T, n *kubenode.Node, ns, name string) []corev1.Pod {
	t.Helper()
	return rolledOut(ctx, t, n, "StatefulSet", ns, name)
}

// rolledOut waits until the workload of kind (Deployment or StatefulSet) has rolled out: its
// status says every replica is updated, Ready and available, and exactly that many pods exist,
// each Ready (and, for a StatefulSet, of its update revision); it returns the pods.
func rolledOut(ctx context.Context, t *testing.T, n *kubenode.Node, kind, ns, name string) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	until(ctx, t, n, kind+" "+ns+"/"+name+" ready", func() (bool, string, error) {
		r, err := rolloutOf(ctx, n, kind, ns, name)
		if err != nil {
			return false, err.Error(), nil
		}
		list, err := n.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(r.selector)})
		if err != nil {
			return false, err.Error(), nil
		}
		var states []string
		ready := 0
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && podReady(&p) && (r.revision == "" || p.Labels[appsv1.ControllerRevisionHashLabelKey] == r.revision) {
				ready++
			}
			states = append(states, p.Name+": "+podState(&p))
		}
		pods = list.Items
		return r.rolled && ready == int(r.want) && len(list.Items) == int(r.want), strings.Join(states, " | "), nil
	})
	return pods
}

// rollout is what a workload's status says of its rollout.
type rollout struct {
	selector *metav1.LabelSelector
	want     int32
	rolled   bool   // every replica updated, Ready and available, for the latest generation
	revision string // a StatefulSet's update revision, which its pods are labelled with
}

func rolloutOf(ctx context.Context, n *kubenode.Node, kind, ns, name string) (rollout, error) {
	switch kind {
	case "Deployment":
		d, err := n.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return rollout{}, err
		}
		want, s := *d.Spec.Replicas, d.Status
		return rollout{selector: d.Spec.Selector, want: want, rolled: d.Generation == s.ObservedGeneration && s.UpdatedReplicas == want &&
			s.ReadyReplicas == want && s.AvailableReplicas == want && s.Replicas == want}, nil
	case "StatefulSet":
		sts, err := n.Client.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return rollout{}, err
		}
		want, s := *sts.Spec.Replicas, sts.Status
		return rollout{selector: sts.Spec.Selector, want: want, revision: s.UpdateRevision,
			rolled: sts.Generation == s.ObservedGeneration && s.CurrentRevision == s.UpdateRevision && s.UpdatedReplicas == want &&
				s.ReadyReplicas == want && s.AvailableReplicas == want && s.Replicas == want}, nil
	}
	return rollout{}, fmt.Errorf("no rollout of a %s", kind)
}

// testInstall follows docs/install.md on the node: the vendor hub (steps 3-4) and cluster east
// of mesh acme (step 5) from deploy/examples, applied with kubectl apply -k, the images loaded
// into the node (the doc's kind path: the images' plain names). The hub and the spoke share the
// node and, as the examples name it, the namespace nave-system (their objects' names differ).
// The spoke dials the names the examples use (spokes.nave.example.com, xds.nave.example.com):
// the node's DNS points them at the Services the doc says to point them at.
func testInstall(t *testing.T, n *kubenode.Node, in *install) {
	ctx := stepContext(t)
	n.AddHost("spokes.nave.example.com", "nave-system", "nave-hub-spokes")
	n.AddHost("xds.nave.example.com", "nave-system", "nave-hub-xds")
	n.AddHost("admin.nave.example.com", "nave-system", "nave-hub-operator")

	// Step 3: the hub.
	start := time.Now()
	kubectl(ctx, t, n, "create", "namespace", "nave-system")
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	kubectl(ctx, t, n, "-n", "nave-system", "create", "secret", "generic", "nave-hub-gossip",
		"--from-literal=keyring="+base64.StdEncoding.EncodeToString(key))
	kubectl(ctx, t, n, "apply", "-k", overlay(t, "examples/vendor-hub", []string{"nave-hub"}, "", nil))
	hubs := statefulSetReady(ctx, t, n, "nave-system", "nave-hub")
	kubectl(ctx, t, n, "-n", "nave-system", "rollout", "status", "statefulset/nave-hub", "--timeout=1m")
	hubReady := time.Since(start)

	// Step 4: the pin and a join token.
	in.pin = in.navectl(ctx, t, n, "ca-hash")
	if !strings.HasPrefix(in.pin, "sha256:") {
		t.Fatalf("navectl ca-hash printed %q", in.pin)
	}
	token := in.navectl(ctx, t, n, "token", "create", "--mesh", "acme", "--cluster", "east", "--ttl", "1h")
	tokenFile := filepath.Join(t.TempDir(), "east.token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// Step 5: cluster east, its spoke.yaml with the pin filled in.
	root, _ := manifests.ModuleRoot()
	cfg, err := os.ReadFile(filepath.Join(root, "deploy", "examples", "acme-east", "spoke.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	spokeYAML := strings.Replace(string(cfg), "sha256:REPLACE-WITH-THE-OUTPUT-OF-navectl-ca-hash", in.pin, 1)
	// the doc's inject.proxyImage, loaded into the node under its plain name
	spokeYAML = strings.Replace(spokeYAML, "registry.example.com/nave/nave-proxy:dev", proxyImage, 1)
	spokeStart := time.Now()
	kubectl(ctx, t, n, "-n", "nave-system", "create", "secret", "generic", "nave-spoke-join", "--from-file=token="+tokenFile)
	kubectl(ctx, t, n, "apply", "--server-side", "-k", overlay(t, "examples/acme-east", []string{"nave-spoke"},
		"configMapGenerator:\n- name: nave-spoke-config\n  namespace: nave-system\n  behavior: replace\n  files:\n  - spoke.yaml\n",
		map[string]string{"spoke.yaml": spokeYAML}))
	deploymentReady(ctx, t, n, "nave-system", "nave-spoke")
	kubectl(ctx, t, n, "-n", "nave-system", "rollout", "status", "deploy/nave-spoke", "--timeout=1m")
	t.Logf("kubectl apply -k to every nave pod Ready: hub (%d replicas) %v; spoke (enrolled) %v after its apply, %v in all",
		len(hubs), hubReady.Round(time.Millisecond), time.Since(spokeStart).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	// Enrolled: the credentials are in their Secret, and the hub lists the cluster.
	sec, err := n.Client.CoreV1().Secrets("nave-system").Get(ctx, "nave-spoke-credentials", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the spoke is ready but its credentials Secret: %v", err)
	}
	if len(sec.Data) == 0 {
		t.Fatal("Secret nave-spoke-credentials is empty")
	}
	if out := in.navectl(ctx, t, n, "cluster", "list"); !strings.Contains(out, "acme") || !strings.Contains(out, "east") {
		t.Fatalf("navectl cluster list does not show acme/east:\n%s", out)
	}
	// The doc's optional step: the join Secret may go once the spoke is ready.
	kubectl(ctx, t, n, "-n", "nave-system", "delete", "secret", "nave-spoke-join")
}

// testSpokeContainerKilled: the spoke's container killed (SIGKILL, in containerd) is restarted
// by the kubelet and becomes ready again from its credentials Secret; the join Secret is gone,
// so it could not have enrolled again.
func testSpokeContainerKilled(t *testing.T, n *kubenode.Node, _ *install) {
	ctx := stepContext(t)
	pods := deploymentReady(ctx, t, n, "nave-system", "nave-spoke")
	pod := pods[0]
	var id string
	var restarts int32
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == "nave-spoke" {
			id, restarts = strings.TrimPrefix(cs.ContainerID, "containerd://"), cs.RestartCount
		}
	}
	if id == "" {
		t.Fatalf("pod %s has no nave-spoke container: %s", pod.Name, podState(&pod))
	}
	if err := n.KillContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	until(ctx, t, n, "the spoke's container restarted and ready", func() (bool, string, error) {
		p, err := n.Client.CoreV1().Pods("nave-system").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == "nave-spoke" && cs.RestartCount > restarts && cs.Ready {
				return true, "", nil
			}
		}
		return false, podState(p), nil
	})
	if _, err := n.Client.CoreV1().Secrets("nave-system").Get(ctx, "nave-spoke-join", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the join Secret: %v; want it deleted (the spoke must come back from its credentials)", err)
	}
}

// testSpokeWithoutSecret: the spoke's credentials Secret deleted (and no join Secret left), a new
// spoke pod cannot come back: it is never ready, and its log says what it lacks.
func testSpokeWithoutSecret(t *testing.T, n *kubenode.Node, _ *install) {
	ctx := stepContext(t)
	kubectl(ctx, t, n, "-n", "nave-system", "delete", "secret", "nave-spoke-credentials")
	pods := deploymentReady(ctx, t, n, "nave-system", "nave-spoke")
	kubectl(ctx, t, n, "-n", "nave-system", "delete", "pod", pods[0].Name, "--wait=false")
	var said string
	until(ctx, t, n, "the new spoke pod says what it lacks", func() (bool, string, error) {
		list, err := n.Client.CoreV1().Pods("nave-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=nave-spoke"})
		if err != nil {
			return false, err.Error(), nil
		}
		for _, p := range list.Items {
			if p.Name == pods[0].Name {
				continue
			}
			if podReady(&p) {
				return false, "", fmt.Errorf("spoke pod %s is ready without credentials or a join token", p.Name)
			}
			log, _ := n.ContainerLog("nave-system", p.Name, "nave-spoke")
			if strings.Contains(log, "token") {
				said = log
				return true, "", nil
			}
			return false, podState(&p) + " log: " + log, nil
		}
		return false, "no new pod yet", nil
	})
	t.Logf("a spoke without its Secrets says:\n%s", lastLines(said, 3))
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
