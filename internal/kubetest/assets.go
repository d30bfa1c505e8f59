// Package kubetest starts a real etcd and kube-apiserver on 127.0.0.1 for a test and always stops
// them. Nothing else of a cluster runs: no controller manager, scheduler or kubelet, so pods stay
// Pending, no EndpointSlices or default ServiceAccounts are made, and namespaces may never finish
// terminating. Tests create what a controller would.
//
// The binaries are built once per version by e2e/kube/build-assets.sh (make kube-assets).
package kubetest

import (
	"os"
	"path/filepath"
	"testing"
)

// KubeVersion is the kube-apiserver version the tests run against; e2e/kube/build-assets.sh
// builds the same.
const KubeVersion = "v1.36.3"

// AssetsEnv names the environment variable that overrides the folder of the binaries.
const AssetsEnv = "NAVE_KUBE_ASSETS"

// Assets returns the directory holding kube-apiserver and etcd: $NAVE_KUBE_ASSETS if set, else
// <module root>/.cache/kube/v1.36.3. Missing binaries fail the test.
func Assets(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(AssetsEnv)
	if dir == "" {
		dir = filepath.Join(moduleRoot(t), ".cache", "kube", KubeVersion)
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if fi, err := os.Stat(filepath.Join(dir, bin)); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			t.Fatalf("%s not built: run make kube-assets (looked in %s)", bin, dir)
		}
	}
	return dir
}

// moduleRoot returns the nearest directory holding go.mod at or above the working directory.
func moduleRoot(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatalf("finding the module root: %v", err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			t.Fatalf("no go.mod at or above %s", wd)
		}
	}
}
