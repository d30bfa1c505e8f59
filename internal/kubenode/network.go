package kubenode

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// setupNetwork creates the pods' cgroup root and the pod bridge with the gateway address (the kubelet's node IP must be
// on an interface before it starts) and lets the host forward between pods and Service
// addresses, which it routes to the bridge: connections to them, from pods or from this host
// (kube-apiserver calling a webhook's Service), are translated by the service proxy and those
// it does not translate stay on the bridge, unanswered. It returns net.ipv4.ip_forward as it was. A bridge left by a node that was killed is
// deleted first.
func setupNetwork() ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := os.Stat("/sys/class/net/" + Bridge); err == nil {
		if err := run(ctx, "ip", "link", "delete", Bridge); err != nil {
			return nil, err
		}
	}
	for _, args := range [][]string{
		{"link", "add", Bridge, "type", "bridge"},
		{"addr", "add", Gateway + "/24", "dev", Bridge},
		{"link", "set", Bridge, "up"},
		{"route", "replace", ServiceCIDR, "dev", Bridge},
	} {
		if err := run(ctx, "ip", args...); err != nil {
			return nil, fmt.Errorf("creating the pod bridge: %w", err)
		}
	}
	if err := createCgroups(); err != nil {
		return nil, err
	}
	prev, err := os.ReadFile(ipForward)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(ipForward, []byte("1"), 0o644); err != nil {
		return nil, fmt.Errorf("enabling IPv4 forwarding: %w", err)
	}
	return prev, nil
}

// ipForward is the switch of IPv4 forwarding.
const ipForward = "/proc/sys/net/ipv4/ip_forward"

// cleanupMachine undoes what the node did to the machine outside its processes: mounts under
// dir (the kubelet's volumes, containerd's root file systems), the bridge, the service proxy's
// iptables chains and the pods' cgroups, and sets IPv4 forwarding back to forward. It returns
// what it could not undo.
func cleanupMachine(dir string, forward []byte) []error {
	var errs []error
	if forward != nil {
		if err := os.WriteFile(ipForward, forward, 0o644); err != nil {
			errs = append(errs, err)
		}
	}
	if err := unmountUnder(dir); err != nil {
		errs = append(errs, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := os.Stat("/sys/class/net/" + Bridge); err == nil {
		if err := run(ctx, "ip", "link", "delete", Bridge); err != nil {
			errs = append(errs, err)
		}
	}
	if err := removeProxyRules(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := removeCgroups(); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// unmountUnder lazily unmounts every mount point under dir, deepest first.
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			points = append(points, fields[4])
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// createCgroups creates cgroupRoot in every v1 hierarchy (the kubelet requires it to exist), its
// cpuset given the parent's CPUs and memory nodes (an empty cpuset cannot hold a process).
func createCgroups() error {
	hierarchies, err := filepath.Glob("/sys/fs/cgroup/*/cgroup.procs")
	if err != nil {
		return err
	}
	for _, procs := range hierarchies {
		parent := filepath.Dir(procs)
		dir := parent + cgroupRoot
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("creating cgroup %s: %w", dir, err)
		}
		if filepath.Base(parent) != "cpuset" {
			continue
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			b, err := os.ReadFile(filepath.Join(parent, f))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
				return fmt.Errorf("setting %s of cgroup %s: %w", f, dir, err)
			}
		}
	}
	return nil
}

// removeCgroups removes the kubelet's cgroup tree (cgroupRoot) from every v1 hierarchy, leaves
// first; the cgroups are empty once the containers are gone.
func removeCgroups() error {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*" + cgroupRoot)
	var errs []error
	for _, root := range roots {
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", dirs[i], err))
			}
		}
	}
	return errors.Join(errs...)
}
