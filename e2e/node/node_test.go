// Package node runs nave on a real single-node Kubernetes cluster (internal/kubenode): a kubelet,
// containerd and runc run the images make images builds, in pods. make test-node runs it; it
// needs root, containerd, runc, the CNI plugins and the node's binaries (make node-assets).
package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/navemesh/nave/internal/kubenode"
	"github.com/navemesh/nave/internal/manifests"
)

// Env is the environment variable that turns the node tests on (make test-node sets it): they
// take minutes and start a kubelet on the machine, so go test ./... leaves them out.
const Env = "NAVE_NODE_TESTS"

// images are the images the tests run, built once per test binary.
var images = []string{"nave-pause", "nave-hub", "nave-spoke", "nave-agent", "nave-proxy", "nave-demo-backend", "nave-demo-client"}

var (
	buildOnce sync.Once
	built     map[string]string
	buildDir  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// buildImages builds the images with internal/imagebuild (as make images does) into a
// temporary directory and returns each tarball by name.
func buildImages(t *testing.T) map[string]string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := manifests.ModuleRoot()
		if err != nil {
			buildErr = err
			return
		}
		out, err := os.MkdirTemp("", "navenode-images-")
		if err != nil {
			buildErr = err
			return
		}
		buildDir = out
		// nave-proxy's base: a stand-in for an Envoy image (writeStandInProxyBase), its envoy
		// the pause program
		pause := filepath.Join(out, "pause")
		cmd := exec.Command("go", "build", "-o", pause, "./internal/kubenode/pause")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("building the pause program: %w\n%s", err, b)
			return
		}
		base := filepath.Join(out, "envoy-standin.tar")
		if buildErr = writeStandInProxyBase(base, pause); buildErr != nil {
			return
		}
		args := append([]string{"run", "./internal/imagebuild", "-out", out, "-version", "v0.0.0-node", "-revision", "node", "-epoch", "1764000000", "-proxy-base", base}, images...)
		cmd = exec.Command("go", args...)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			buildErr = err
			t.Logf("%s", b)
			return
		}
		built = map[string]string{}
		for _, im := range images {
			built[im] = filepath.Join(out, im+".tar")
		}
	})
	if buildErr != nil {
		t.Fatalf("building the images: %v", buildErr)
	}
	return built
}

// buildNavectl builds navectl into the images' directory and returns its path.
func buildNavectl(t *testing.T) string {
	t.Helper()
	buildImages(t)
	root, err := manifests.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(buildDir, "navectl")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/navectl")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building navectl: %v\n%s", err, b)
	}
	return bin
}

// startNode starts a node with every image imported.
func startNode(t *testing.T) *kubenode.Node {
	t.Helper()
	if os.Getenv(Env) == "" {
		t.Skipf("the node tests run with %s=1 (make test-node)", Env)
	}
	kubenode.Require(t)
	imgs := buildImages(t)
	var tarballs []string
	for _, im := range images {
		tarballs = append(tarballs, imgs[im])
	}
	return kubenode.Start(t, kubenode.Options{Images: tarballs})
}

// timeout bounds each step a test waits for on the node.
const timeout = 3 * time.Minute

func stepContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return ctx
}
