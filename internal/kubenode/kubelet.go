package kubenode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/navemesh/nave/internal/kubetest"
)

// cgroupRoot is the cgroup (in every v1 hierarchy) the kubelet puts its pods under, so they
// never mix with the machine's.
const cgroupRoot = "/navenode"

// kubeletConfig is the kubelet's configuration. What differs from the defaults, and why:
// cgroupfs (PID 1 is not systemd); a cgroup root of its own; no eviction thresholds worth the
// name and no image garbage collection (a shared test machine's disk must not evict pods or
// delete the imported images, which cannot be pulled again); no read-only or healthz port; the
// API server may reach the kubelet's port (logs, exec) with any credentials, only on the
// bridge's address; no iptables utility chains on the host.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: "{{gateway}}"
port: {{port}}
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
cgroupDriver: cgroupfs
cgroupRoot: ` + cgroupRoot + `
cgroupsPerQOS: true
enforceNodeAllocatable: ["pods"]
failSwapOn: false
containerRuntimeEndpoint: "unix://{{dir}}/containerd.sock"
podCIDR: "{{cidr}}"
clusterDNS: ["{{gateway}}"]
clusterDomain: ` + ClusterDomain + `
resolvConf: "{{dir}}/resolv.conf"
podLogsDir: "{{dir}}/pod-logs"
volumePluginDir: "{{dir}}/volume-plugins"
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  imagefs.available: "1%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
makeIPTablesUtilChains: false
serializeImagePulls: false
maxPods: 60
nodeStatusUpdateFrequency: 2s
syncFrequency: 10s
fileCheckFrequency: 10s
shutdownGracePeriod: 0s
`

// startKubelet writes the kubelet's configuration and starts it.
func (n *Node) startKubelet(assets string) error {
	port, err := freePort(Gateway)
	if err != nil {
		return err
	}
	for _, d := range []string{"kubelet", "pod-logs", "volume-plugins"} {
		if err := os.MkdirAll(filepath.Join(n.Dir, d), 0o755); err != nil {
			return err
		}
	}
	// Pods' resolv.conf is the node's DNS server (clusterDNS); this one is the kubelet's own, for
	// hostNetwork pods: nothing outside the machine is reachable.
	if err := os.WriteFile(filepath.Join(n.Dir, "resolv.conf"), []byte("nameserver "+Gateway+"\n"), 0o644); err != nil {
		return err
	}
	cfg := filepath.Join(n.Dir, "kubelet.yaml")
	body := strings.ReplaceAll(n.expand(kubeletConfig), "{{port}}", strconv.Itoa(port))
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		return err
	}
	n.kubelet, err = kubetest.StartProcess("kubelet", filepath.Join(assets, "kubelet"), filepath.Join(n.Dir, "kubelet.log"),
		"--config="+cfg,
		"--kubeconfig="+n.Kubeconfig,
		"--root-dir="+filepath.Join(n.Dir, "kubelet"),
		"--hostname-override="+Name,
		"--node-ip="+Gateway,
		"--v=1",
	)
	return err
}

// startControllerManager starts kube-controller-manager with every default controller: the
// Deployment and ReplicaSet controllers, service account and token controllers (the pods' API
// credentials), EndpointSlices. It serves nothing (--secure-port=0).
func (n *Node) startControllerManager(assets string) error {
	var err error
	n.controllerManager, err = kubetest.StartProcess("kube-controller-manager", filepath.Join(assets, "kube-controller-manager"),
		filepath.Join(n.Dir, "kube-controller-manager.log"),
		"--kubeconfig="+n.Kubeconfig,
		"--service-account-private-key-file="+n.Cluster.ServiceAccountKeyFile,
		"--root-ca-file="+n.Cluster.CAFile,
		"--leader-elect=false",
		"--secure-port=0",
		"--controllers=*",
		"--concurrent-deployment-syncs=5",
		"--node-monitor-grace-period=60s",
	)
	return err
}

// drain deletes every pod at once (no grace) and waits, up to a minute, until containerd runs
// no more containers: the kubelet then has stopped them and torn down their networks.
func (n *Node) drain() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nss, err := n.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		n.t.Logf("node cleanup: listing namespaces: %v", err)
		return
	}
	zero := int64(0)
	for _, ns := range nss.Items {
		if err := n.Client.CoreV1().Pods(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
			n.t.Logf("node cleanup: deleting the pods of %s: %v", ns.Name, err)
		}
	}
	for {
		out, err := n.ctrOutput(ctx, "tasks", "list", "--quiet")
		if err == nil && len(out) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			n.t.Logf("node cleanup: containers still running a minute after their pods were deleted:\n%s", out)
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ContainerLog returns what a container of a pod wrote (every run of it, in the CRI log
// format's message part), read from the kubelet's log directory.
func (n *Node) ContainerLog(namespace, pod, container string) (string, error) {
	files, err := filepath.Glob(filepath.Join(n.Dir, "pod-logs", namespace+"_"+pod+"_*", container, "*.log"))
	if err != nil || len(files) == 0 {
		return "", fmt.Errorf("no log of container %s of pod %s/%s yet", container, namespace, pod)
	}
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		// time stream tag message
		for _, line := range strings.Split(string(data), "\n") {
			if parts := strings.SplitN(line, " ", 4); len(parts) == 4 {
				b.WriteString(parts[3])
				b.WriteByte('\n')
			}
		}
	}
	return b.String(), nil
}
