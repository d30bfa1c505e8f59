// Package kubenode starts a single-node Kubernetes cluster for a test, from parts, and always
// stops it: internal/kubetest's etcd and kube-apiserver, kube-controller-manager, a kubelet,
// containerd with runc, and CNI bridge networking on a Linux bridge the node creates. What a
// full cluster has beyond that is stood in for here, in the test binary, for one node only: a
// binder assigns each pending pod to the node once its requests fit (the scheduler's job), a
// service proxy writes iptables DNAT rules from Services and EndpointSlices (kube-proxy's), and
// a DNS server answers <service>.<namespace>.svc.cluster.local (CoreDNS's). No registry is reachable: images
// are built by internal/imagebuild and imported into containerd (ImportImages).
//
// Every process is started and stopped by its PID; the pods' containers are removed before
// containerd stops, then the bridge, the iptables chains and the mounts under the node's
// directory. The facts behind the versions and settings are in docs/node-tests.md.
package kubenode

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/navemesh/nave/internal/kubetest"
	"github.com/navemesh/nave/internal/testenv"
)

// KubeletVersion is the kubelet e2e/kube/build-assets.sh builds (make node-assets): the newest
// minor that runs on cgroup v1 without an opt-out and supports containerd 1.x, within the
// version-skew policy of kubetest.KubeVersion (docs/node-tests.md).
const KubeletVersion = "v1.34.4"

// Name is the node's name.
const Name = "nave-node"

// The pod network: a bridge and a /24 that nothing else on the test machines uses. The gateway
// is the host's address on the bridge: the kubelet's node IP, where pods reach kube-apiserver
// and the node's DNS server.
const (
	Bridge  = "navenode0"
	PodCIDR = "10.213.7.0/24"
	Gateway = "10.213.7.1"
)

// ServiceCIDR is kube-apiserver's Service address range (internal/kubetest's), routed to the
// bridge so that no connection to it leaves the machine.
const ServiceCIDR = "10.96.0.0/16"

// KubernetesServiceIP is the address of Service default/kubernetes (the first of ServiceCIDR).
const KubernetesServiceIP = "10.96.0.1"

// ClusterDomain is the DNS suffix the node's DNS server answers for.
const ClusterDomain = "cluster.local"

// startTimeout bounds how long the node may take to become Ready.
const startTimeout = 3 * time.Minute

// logTailLines is how much of each process's log a failed test prints.
const logTailLines = 60

// Options configures Start.
type Options struct {
	// Images are image tarballs (internal/imagebuild's) imported into containerd before the
	// kubelet starts. The pod sandbox image, nave-pause, must be among them.
	Images []string
}

// Node is a running single-node cluster. Its fields are set by Start and never change; its
// methods may be called from any goroutine.
type Node struct {
	// Cluster is the API server the node registered with.
	Cluster *kubetest.Cluster
	// Client is an admin clientset.
	Client kubernetes.Interface
	// Kubeconfig is an admin kubeconfig file, for kubectl.
	Kubeconfig string
	// Dir holds the node's configuration, state and logs.
	Dir string
	// Containerd is containerd's socket.
	Containerd string
	// StartDuration is how long Start took, from kube-apiserver's start to the node Ready.
	StartDuration time.Duration

	containerd, kubelet, controllerManager *kubetest.Process
	dns                                    *dnsServer
	ipForward                              []byte // net.ipv4.ip_forward before the node
	stopStandIns                           context.CancelFunc
	standIns                               sync.WaitGroup
	stopOnce                               sync.Once
	t                                      testing.TB
}

// Require ends the test with testenv.Missing unless this machine can run a node: root, and
// containerd, runc, ctr, the CNI plugins, iptables and ip installed (.ci/run installs them).
func Require(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "a Kubernetes node needs root")
	}
	for _, bin := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "iptables", "ip"} {
		if _, err := exec.LookPath(bin); err != nil {
			testenv.Missing(t, "a Kubernetes node needs %s (apt-get install containerd runc iptables iproute2): %v", bin, err)
		}
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(CNIBinDir, p)); err != nil {
			testenv.Missing(t, "a Kubernetes node needs the CNI plugin %s (apt-get install containernetworking-plugins): %v", p, err)
		}
	}
}

// CNIBinDir is where Debian's containernetworking-plugins installs the plugins.
const CNIBinDir = "/usr/lib/cni"

// Start starts the node and waits until it is Ready; it stops everything when the test ends.
// Only one node can run on a machine at a time (the bridge and the pod network are fixed).
func Start(t testing.TB, opts Options) *Node {
	t.Helper()
	Require(t)
	assets := kubetest.Assets(t)
	for _, bin := range []string{"kubelet", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			t.Fatalf("%s not built: run make node-assets (looked in %s)", bin, assets)
		}
	}
	begin := time.Now()
	removeStale(t)
	// A short directory outside t.TempDir(): unix socket paths are limited to 108 bytes, and the
	// kubelet's volume mounts must be unmounted before the directory can go.
	dir, err := os.MkdirTemp("", "navenode-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		t.Fatal(err)
	}
	n := &Node{Dir: dir, Containerd: filepath.Join(dir, "containerd.sock"), t: t}
	// Started first, so stopped last (cleanups run in reverse): the node's own cleanup deletes
	// the pods through it.
	// Pods reach kube-apiserver as in-cluster clients do, at the kubernetes Service's address
	// (translated to the gateway), and check its certificate for that address.
	n.Cluster = kubetest.Start(t, kubetest.Options{
		ExtraIPs:                []net.IP{net.ParseIP(Gateway), net.ParseIP(KubernetesServiceIP)},
		ServiceAccountAdmission: true,
		// kubectl logs and exec: the node's name resolves nowhere, its address is the gateway
		APIServerArgs: []string{"--kubelet-preferred-address-types=InternalIP"},
	})
	n.Kubeconfig = n.Cluster.Kubeconfig(t, "")
	if n.Client, err = kubernetes.NewForConfig(n.Cluster.Admin); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range []*kubetest.Process{n.containerd, n.kubelet, n.controllerManager} {
				if p != nil {
					t.Logf("%s log (end):\n%s", p.Name(), p.Tail(logTailLines))
				}
			}
		}
		if t.Failed() {
			// The kubelet deletes the logs of the pods Stop deletes: keep them.
			if err := os.CopyFS(filepath.Join(dir, "pod-logs-at-failure"), os.DirFS(filepath.Join(dir, "pod-logs"))); err != nil {
				t.Logf("keeping the pods' logs: %v", err)
			}
		}
		n.Stop()
		if !t.Failed() {
			os.RemoveAll(dir)
		} else {
			t.Logf("node files kept in %s", dir)
		}
	})
	if n.ipForward, err = setupNetwork(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()

	if err := n.startContainerd(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.ImportImages(ctx, opts.Images...); err != nil {
		t.Fatal(err)
	}
	if err := n.startKubelet(assets); err != nil {
		t.Fatal(err)
	}
	if err := n.startControllerManager(assets); err != nil {
		t.Fatal(err)
	}
	standCtx, stop := context.WithCancel(context.Background())
	n.stopStandIns = stop
	if err := n.startStandIns(standCtx); err != nil {
		t.Fatal(err)
	}
	if err := n.waitReady(ctx); err != nil {
		t.Fatal(err)
	}
	n.StartDuration = time.Since(begin)
	t.Logf("node %s Ready in %v", Name, n.StartDuration.Round(time.Millisecond))
	return n
}

// ownerFile, in a node's directory, holds the PID of the test process that started the node.
const ownerFile = "owner.pid"

// removeStale undoes what a node left on the machine whose test process died without stopping
// it (a timeout, a SIGKILL): the kernel killed its processes (their parent-death signal), but
// not the containers, mounts, bridge and rules.
func removeStale(t testing.TB) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "navenode-*", ownerFile))
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || syscall.Kill(pid, 0) == nil {
			continue // not a number, or its test is still running
		}
		dir := filepath.Dir(f)
		t.Logf("removing what the node of test process %d left in %s", pid, dir)
		killOrphans(dir)
		for _, err := range cleanupMachine(dir, nil) {
			t.Logf("stale node cleanup: %v", err)
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Logf("stale node cleanup: %v", err)
		}
	}
}

// Stop deletes every pod, stops the controller manager, the kubelet, the stand-ins and
// containerd, and removes what the node set up on the machine. Calling it again does nothing.
func (n *Node) Stop() {
	n.stopOnce.Do(func() {
		if n.controllerManager != nil {
			n.controllerManager.Stop()
		}
		if n.kubelet != nil {
			n.drain()
			n.kubelet.Stop()
		}
		if n.stopStandIns != nil {
			n.stopStandIns()
			n.standIns.Wait()
		}
		if n.containerd != nil {
			n.removeContainers()
			n.containerd.Stop()
		}
		for _, err := range cleanupMachine(n.Dir, n.ipForward) {
			n.t.Logf("node cleanup: %v", err)
		}
	})
}

// Kubectl runs kubectl with the admin kubeconfig and returns its combined output.
func (n *Node) Kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", n.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Logs returns the ends of the node's process logs, for a failure message.
func (n *Node) Logs() string {
	var b strings.Builder
	for _, p := range []*kubetest.Process{n.containerd, n.kubelet, n.controllerManager} {
		if p != nil {
			fmt.Fprintf(&b, "--- %s (pid %d)\n%s\n", p.Name(), p.PID(), p.Tail(logTailLines))
		}
	}
	return b.String()
}

// waitReady waits until the Node object reports Ready, or a process exits.
func (n *Node) waitReady(ctx context.Context) error {
	last := "not registered"
	for {
		for _, p := range []*kubetest.Process{n.containerd, n.kubelet, n.controllerManager} {
			if done, err := p.Exited(); done {
				return fmt.Errorf("%s exited while the node started: %v\n%s", p.Name(), err, p.Tail(logTailLines))
			}
		}
		node, err := n.Client.CoreV1().Nodes().Get(ctx, Name, metav1.GetOptions{})
		if err == nil {
			last = "no Ready condition"
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady {
					if c.Status == corev1.ConditionTrue {
						return nil
					}
					last = c.Reason + ": " + c.Message
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s not Ready after %v (last: %s)\n%s", Name, startTimeout, last, n.Logs())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// freePort returns a TCP port on addr that was free a moment ago.
func freePort(addr string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// run runs a command and returns an error carrying its output.
func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
