package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/navemesh/nave/internal/kubenode"
)

// echoHost is the demo's echo Service (testProxylessWorkloads), whose endpoints the
// watchers of the hub tests hold.
const echoHost = "echo.demo.svc.cluster.local"

// watchEcho starts an xdsWatcher of the echo Service that dials the oldest ready hub pod
// (next time: the oldest ready one left), and waits until it holds the Service's clusters
// and endpoints; it returns the watcher and the hub pod it dialled.
func watchEcho(ctx context.Context, t *testing.T, n *kubenode.Node, in *install) (*xdsWatcher, podAddr) {
	t.Helper()
	var mu sync.Mutex
	var first podAddr
	w := startWatcher(ctx, t, n, in, echoHost, func() (string, string) {
		pods := hubPods(ctx, n)
		if len(pods) == 0 {
			return "", ""
		}
		mu.Lock()
		if first.name == "" {
			first = pods[0]
		}
		mu.Unlock()
		return pods[0].String(), pods[0].addr
	})
	until(ctx, t, n, "the watcher holds the echo Service's clusters and endpoints", func() (bool, string, error) {
		err := w.holds(echoHost)
		return err == nil, fmt.Sprint(err), nil
	})
	mu.Lock()
	defer mu.Unlock()
	return w, first
}

// checkNothingRemoved proves that the watcher received no removal and no assignment without
// endpoints for the echo Service, and that every call the demo client made since since was
// answered, by a later event rather than a wait: a marker Service is created (selecting the
// echo pods), and once the watcher holds its cluster, what the hub sent before it has
// arrived. It fails unless the watcher's streams were answered by want or more hub pods.
func checkNothingRemoved(ctx context.Context, t *testing.T, n *kubenode.Node, w *xdsWatcher, since time.Time, marker string, want int) {
	t.Helper()
	_, err := n.Client.CoreV1().Services("demo").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: marker},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "echo"},
			Ports: []corev1.ServicePort{{Name: "grpc", Port: 7070, TargetPort: intstr.FromInt32(7070)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	until(ctx, t, n, "the watcher holds marker Service "+marker, func() (bool, string, error) {
		err := w.holds(marker + ".demo.svc.cluster.local")
		return err == nil, fmt.Sprint(err), nil
	})
	all, emptied, servers := w.state()
	// The removal of an earlier test's marker is one the test made (a replica may learn of
	// it after the watcher's first answer); any other removal is not.
	var removals []string
	for _, r := range all {
		if !strings.Contains(r, "|marker-") || strings.HasSuffix(r, "|"+marker+".demo.svc.cluster.local") {
			removals = append(removals, r)
		}
	}
	if len(removals) > 0 || len(emptied) > 0 {
		t.Errorf("the watcher was sent removals %v and assignments without endpoints for %v", removals, emptied)
	}
	if distinct := slices.Compact(slices.Clone(servers)); len(distinct) < want {
		t.Errorf("the watcher's streams were answered by %v; want %d hub pods or more (it never failed over)", servers, want)
	}
	calls, err := clientCalls(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	answered := 0
	for _, c := range calls {
		at, err := time.Parse(time.RFC3339Nano, c.Time)
		if err != nil || at.Before(since) {
			continue
		}
		if c.Code != "OK" {
			t.Errorf("the demo client's call %d at %s failed while the hub's pods changed: %s %s", c.Seq, c.Time, c.Code, c.Error)
		} else {
			answered++
		}
	}
	if answered == 0 {
		t.Errorf("the demo client made no call since %s", since.Format(time.RFC3339Nano))
	}
	t.Logf("the watcher's streams were answered by %s; %d removals sent; the demo client's %d calls since answered", strings.Join(servers, ", "), len(removals)+len(emptied), answered)
	// The marker goes, and the hub's clients have it removed before the next test watches.
	if err := n.Client.CoreV1().Services("demo").Delete(ctx, marker, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	until(ctx, t, n, "the watcher sent the removal of marker Service "+marker, func() (bool, string, error) {
		err := w.holds(marker + ".demo.svc.cluster.local")
		return err != nil, "still held", nil
	})
}

// testHubPodReplaced: the hub pod a proxyless watcher is connected to is deleted. The
// StatefulSet replaces it under the same name (a new pod), the others serving meanwhile, and
// the spoke stays ready; the pod's own name under the StatefulSet's Service
// (NAME.nave-hub-replicas.nave-system.svc, what inject.xdsReplicas lists) leads to the new pod,
// and the hub's certificate is valid for it. The watcher, reconnecting to another replica, is
// sent no removal of the echo Service's clusters or endpoints, and the demo client (grpc-go's
// xDS client, connected through the xds Service to any replica) has every call answered.
func testHubPodReplaced(t *testing.T, n *kubenode.Node, in *install) {
	ctx := stepContext(t)
	statefulSetReady(ctx, t, n, "nave-system", "nave-hub")
	w, victim := watchEcho(ctx, t, n, in)
	roots, pair := hubTrust(ctx, t, n, in)
	deleted := time.Now()
	if err := n.Client.CoreV1().Pods("nave-system").Delete(ctx, victim.name, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(victim.uid))}); err != nil {
		t.Fatal(err)
	}
	until(ctx, t, n, "hub pod "+victim.String()+" gone", func() (bool, string, error) {
		p, err := n.Client.CoreV1().Pods("nave-system").Get(ctx, victim.name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || err == nil && p.UID != victim.uid, "still there", nil
	})
	after := statefulSetReady(ctx, t, n, "nave-system", "nave-hub")
	var back *corev1.Pod
	for i, p := range after {
		if p.UID == victim.uid {
			t.Fatalf("hub pod %s survived its deletion", victim)
		}
		if p.Name == victim.name {
			back = &after[i]
		}
	}
	if back == nil {
		t.Fatalf("hub pod %s is not back under its name", victim.name)
	}
	t.Logf("hub pod %s deleted: replaced by %s/%.8s, 3 Ready again after %v", victim, back.Name, back.UID, time.Since(deleted).Round(time.Millisecond))
	checkReplicaName(ctx, t, n, back, roots, pair)
	deploymentReady(ctx, t, n, "nave-system", "nave-spoke")
	checkNothingRemoved(ctx, t, n, w, deleted, "marker-replaced", 2)
}

// checkReplicaName checks a hub pod's own name, as inject.xdsReplicas lists it
// (POD.SERVICE.nave-system.svc, SERVICE the StatefulSet's serviceName): the node's DNS
// resolves it to the pod's address alone, and a TLS client dialling the pod's xDS port by
// that name accepts the hub's certificate (tls.hosts' wildcard).
func checkReplicaName(ctx context.Context, t *testing.T, n *kubenode.Node, pod *corev1.Pod, roots *x509.CertPool, pair tls.Certificate) {
	t.Helper()
	sts, err := n.Client.AppsV1().StatefulSets("nave-system").Get(ctx, "nave-hub", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	name := pod.Name + "." + sts.Spec.ServiceName + ".nave-system.svc"
	// the node's DNS server, as the pods' resolv.conf names it
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", net.JoinHostPort(kubenode.Gateway, "53"))
	}}
	until(ctx, t, n, name+" resolves to pod "+pod.Name+"'s address "+pod.Status.PodIP, func() (bool, string, error) {
		addrs, err := r.LookupHost(ctx, name+"."+kubenode.ClusterDomain+".")
		if err != nil {
			return false, err.Error(), nil
		}
		return slices.Equal(addrs, []string{pod.Status.PodIP}), fmt.Sprint(addrs), nil
	})
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", net.JoinHostPort(pod.Status.PodIP, "15010"),
		&tls.Config{RootCAs: roots, ServerName: name, Certificates: []tls.Certificate{pair}, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("TLS to hub pod %s as %s: %v", pod.Name, name, err)
	}
	conn.Close()
}

// hubRequestsCPU is the hub's CPU request in the second rolling update's overlay, a change of
// the pods' template applied as an upgrade applies a new image or config.
const hubRequestsCPU = "150m"

// lowerRequests is an overlay patch of the vendor hub lowering its CPU request.
const lowerRequests = "patches:\n- target: {kind: StatefulSet, name: nave-hub}\n  patch: |-\n    - op: replace\n" +
	"      path: /spec/template/spec/containers/0/resources/requests/cpu\n      value: " + hubRequestsCPU + "\n"

// testHubRollingUpdate: rolling updates of the hub's StatefulSet with the shipped requests and
// strategy on this one 2-core node, where three hubs and the spoke already request 1600m and no
// fourth hub pod would fit: a StatefulSet replaces one pod at a time and never surges, so it
// needs no room (docs/install.md, Upgrading). kubectl rollout restart, then an apply that
// changes the pods' template (the CPU request lowered by an overlay), each finish (rollout
// status) with every pod new (its name back, its uid another); a proxyless watcher, moved from
// replica to replica, is sent no removal, while every call of the demo client is answered.
func testHubRollingUpdate(t *testing.T, n *kubenode.Node, in *install) {
	ctx := stepContext(t)
	before := statefulSetReady(ctx, t, n, "nave-system", "nave-hub")
	w, _ := watchEcho(ctx, t, n, in)
	start := time.Now()
	kubectl(ctx, t, n, "-n", "nave-system", "rollout", "restart", "statefulset/nave-hub")
	kubectl(ctx, t, n, "-n", "nave-system", "rollout", "status", "statefulset/nave-hub", "--timeout=2m")
	restarted := statefulSetReady(ctx, t, n, "nave-system", "nave-hub")
	newPods(t, before, restarted, "kubectl rollout restart")
	restartTook := time.Since(start)

	lower := time.Now()
	kubectl(ctx, t, n, "apply", "-k", overlay(t, "examples/vendor-hub", []string{"nave-hub"}, lowerRequests, nil))
	kubectl(ctx, t, n, "-n", "nave-system", "rollout", "status", "statefulset/nave-hub", "--timeout=2m")
	lowered := statefulSetReady(ctx, t, n, "nave-system", "nave-hub")
	newPods(t, restarted, lowered, "the apply of lowered requests")
	t.Logf("rolling updates of the hub (3 replicas, one pod at a time): kubectl rollout restart %v; the apply of CPU request %s %v",
		restartTook.Round(time.Millisecond), hubRequestsCPU, time.Since(lower).Round(time.Millisecond))
	for _, p := range lowered {
		if got := p.Spec.Containers[0].Resources.Requests.Cpu().String(); got != hubRequestsCPU {
			t.Errorf("hub pod %s requests CPU %s; want the overlay's %s", p.Name, got, hubRequestsCPU)
		}
	}
	deploymentReady(ctx, t, n, "nave-system", "nave-spoke")
	checkNothingRemoved(ctx, t, n, w, start, "marker-rolled", 2)
}

// newPods fails the test for every pod of after that was among before (the same uid: a
// StatefulSet's new pod keeps the old one's name): what rolled left it.
func newPods(t *testing.T, before, after []corev1.Pod, what string) {
	t.Helper()
	for _, p := range after {
		for _, old := range before {
			if p.UID == old.UID {
				t.Errorf("hub pod %s/%.8s survived %s", p.Name, p.UID, what)
			}
		}
	}
}
