package kubenode

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/navemesh/nave/internal/kubetest"
)

// SandboxImage is the pod sandbox image containerd runs (built from ./internal/kubenode/pause
// by internal/imagebuild as nave-pause:dev; containerd names it so once imported).
const SandboxImage = "docker.io/library/nave-pause:dev"

// criNamespace is the containerd namespace the CRI plugin keeps the kubelet's images and
// containers in.
const criNamespace = "k8s.io"

// containerdConfig is containerd 1.6's configuration (version 2) for the node: its own root,
// state and socket under the node's directory, so it never meets a containerd the machine runs;
// runc with cgroupfs (no systemd on the test machines) and a state root of its own; CNI from
// Debian's plugins.
const containerdConfig = `version = 2
root = "{{dir}}/containerd/root"
state = "{{dir}}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{{dir}}/containerd.sock"

[ttrpc]
  address = "{{dir}}/containerd.sock.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{{dir}}/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{{sandbox}}"
  enable_selinux = false
  disable_apparmor = true
  # the test machines' root lacks CAP_SYS_RESOURCE: runc cannot lower a container's
  # oom_score_adj below containerd's own (the kubelet asks -998 for the sandbox)
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{{dir}}/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{{cnibin}}"
    conf_dir = "{{dir}}/cni"
    max_conf_num = 1
`

// cniConfig is the pod network: a bridge whose gateway is the host, addresses from host-local.
// No masquerade: pod traffic stays on this machine.
const cniConfig = `{
  "cniVersion": "0.4.0",
  "name": "navenode",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "{{bridge}}",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "{{dir}}/cni-ipam",
        "ranges": [[{"subnet": "{{cidr}}", "gateway": "{{gateway}}"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
`

// expand replaces {{dir}}, {{bridge}} and the other placeholders of a template.
func (n *Node) expand(tmpl string) string {
	return strings.NewReplacer(
		"{{dir}}", n.Dir, "{{sandbox}}", SandboxImage, "{{cnibin}}", CNIBinDir,
		"{{bridge}}", Bridge, "{{cidr}}", PodCIDR, "{{gateway}}", Gateway,
	).Replace(tmpl)
}

// startContainerd writes containerd's and CNI's configuration and starts containerd, waiting
// until its socket answers.
func (n *Node) startContainerd(ctx context.Context) error {
	for _, d := range []string{"containerd", "cni", "cni-ipam"} {
		if err := os.MkdirAll(filepath.Join(n.Dir, d), 0o755); err != nil {
			return err
		}
	}
	cfg := filepath.Join(n.Dir, "containerd.toml")
	if err := os.WriteFile(cfg, []byte(n.expand(containerdConfig)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(n.Dir, "cni", "10-navenode.conflist"), []byte(n.expand(cniConfig)), 0o644); err != nil {
		return err
	}
	bin, err := exec.LookPath("containerd")
	if err != nil {
		return err
	}
	n.containerd, err = kubetest.StartProcess("containerd", bin, filepath.Join(n.Dir, "containerd.log"), "--config", cfg)
	if err != nil {
		return err
	}
	for {
		if done, err := n.containerd.Exited(); done {
			return fmt.Errorf("containerd exited while starting: %v\n%s", err, n.containerd.Tail(logTailLines))
		}
		if err := n.ctr(ctx, "version"); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("containerd not answering on %s: %w\n%s", n.Containerd, ctx.Err(), n.containerd.Tail(logTailLines))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ctr runs ctr against the node's containerd in the CRI namespace.
func (n *Node) ctr(ctx context.Context, args ...string) error {
	return run(ctx, "ctr", append([]string{"--address", n.Containerd, "--namespace", criNamespace}, args...)...)
}

// ctrOutput is ctr returning its standard output.
func (n *Node) ctrOutput(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", n.Containerd, "--namespace", criNamespace}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("ctr %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}

// ImportImages imports image tarballs (docker save style, as internal/imagebuild writes them)
// into containerd, where the kubelet finds them without pulling: an image named nave-hub:dev in
// a pod spec is docker.io/library/nave-hub:dev here.
func (n *Node) ImportImages(ctx context.Context, tarballs ...string) error {
	for _, tb := range tarballs {
		if err := n.ctr(ctx, "images", "import", tb); err != nil {
			return fmt.Errorf("importing %s: %w", tb, err)
		}
	}
	return nil
}

// removeContainers kills and deletes every task and container containerd still runs (what the
// kubelet left), so their shims exit before containerd stops.
func (n *Node) removeContainers() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := n.ctrOutput(ctx, "containers", "list", "--quiet")
	if err != nil {
		n.t.Logf("node cleanup: %v", err)
		return
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		id := strings.TrimSpace(sc.Text())
		if id == "" {
			continue
		}
		netns := ""
		if info, err := n.ctrOutput(ctx, "containers", "info", id); err == nil {
			netns = networkNamespace(info)
		}
		_ = n.ctr(ctx, "tasks", "kill", "--signal", "SIGKILL", id)
		_ = n.ctr(ctx, "tasks", "delete", "--force", id)
		if err := n.ctr(ctx, "containers", "delete", id); err != nil {
			n.t.Logf("node cleanup: %v", err)
		}
		// A sandbox's network namespace, which the CRI plugin removes only when the kubelet
		// removes the sandbox (it may not have yet).
		if _, err := os.Stat(netns); err == nil && strings.HasPrefix(netns, netnsDir+"/") {
			if err := run(ctx, "ip", "netns", "delete", filepath.Base(netns)); err != nil {
				n.t.Logf("node cleanup: %v", err)
			}
		}
	}
}

// KillContainer kills a container's task with SIGKILL, as a crash would; the kubelet restarts
// it. id is the container ID of a pod's status, without its containerd:// prefix.
func (n *Node) KillContainer(ctx context.Context, id string) error {
	return n.ctr(ctx, "tasks", "kill", "--signal", "SIGKILL", id)
}

// ContainerPID returns the host PID of a running container's process. id is as for
// KillContainer.
func (n *Node) ContainerPID(ctx context.Context, id string) (int, error) {
	out, err := n.ctrOutput(ctx, "tasks", "list")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == id {
			return strconv.Atoi(f[1])
		}
	}
	return 0, fmt.Errorf("container %s: no running task", id)
}

// killOrphans kills what a node whose containerd died left running: its containers (through
// runc, in the node's runc root) and containerd's shims of the node's socket, found by their
// command line and killed by PID.
func killOrphans(dir string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	root := filepath.Join(dir, "runc", criNamespace) // the shim's runc root: Root/<namespace>
	if out, err := exec.CommandContext(ctx, "runc", "--root", root, "list", "--quiet").Output(); err == nil {
		for _, id := range strings.Fields(string(out)) {
			_ = run(ctx, "runc", "--root", root, "kill", id, "KILL")
			_ = run(ctx, "runc", "--root", root, "delete", "--force", id)
		}
	}
	// The pods' network namespaces (an address in the pod network; those of other programs have
	// none there). Only one node runs at a time.
	nss, _ := filepath.Glob(filepath.Join(netnsDir, "cni-*"))
	for _, ns := range nss {
		out, err := exec.CommandContext(ctx, "ip", "-n", filepath.Base(ns), "-4", "-o", "addr").Output()
		if err == nil && strings.Contains(string(out), " "+Gateway[:strings.LastIndexByte(Gateway, '.')+1]) {
			_ = run(ctx, "ip", "netns", "delete", filepath.Base(ns))
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	marker := "-address\x00" + filepath.Join(dir, "containerd.sock") + "\x00"
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err != nil || !strings.Contains(string(b), "containerd-shim") || !strings.Contains(string(b)+"\x00", marker) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(f))); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// netnsDir is where containerd 1.6's CRI plugin pins the pods' network namespaces (cni-<uuid>).
const netnsDir = "/var/run/netns"

// networkNamespace returns the network namespace path in ctr containers info's output (the OCI
// spec's linux.namespaces), "" if there is none.
func networkNamespace(info string) string {
	var c struct {
		Spec struct {
			Linux struct {
				Namespaces []struct {
					Type string `json:"type"`
					Path string `json:"path"`
				} `json:"namespaces"`
			} `json:"linux"`
		} `json:"Spec"`
	}
	if json.Unmarshal([]byte(info), &c) != nil {
		return ""
	}
	for _, ns := range c.Spec.Linux.Namespaces {
		if ns.Type == "network" {
			return ns.Path
		}
	}
	return ""
}

// SandboxPID returns the host PID of a pod's sandbox (its pause process), whose namespaces are
// the pod's: /proc/PID/ns/net is the pod's network namespace.
func (n *Node) SandboxPID(ctx context.Context, podUID string) (int, error) {
	out, err := n.ctrOutput(ctx, "containers", "list", "--quiet",
		`labels."io.kubernetes.pod.uid"==`+podUID+`,labels."io.cri-containerd.kind"==sandbox`)
	if err != nil {
		return 0, err
	}
	ids := strings.Fields(out)
	if len(ids) == 0 {
		return 0, fmt.Errorf("pod %s: no sandbox", podUID)
	}
	return n.ContainerPID(ctx, ids[len(ids)-1])
}
