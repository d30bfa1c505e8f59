// Package e2e starts nave's real binaries as processes on loopback and
// drives them with a real grpc-go xDS client.
package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/navemesh/nave/e2e/harness"
)

// bin holds the binaries built once for the whole package.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "nave-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = dir
	err = harness.Build(dir, map[string]string{
		"nave-hub":          "./hub/cmd/nave-hub",
		"nave-spoke":        "./spoke/cmd/nave-spoke",
		"nave-agent":        "./spoke/cmd/nave-agent",
		"navectl":           "./cmd/navectl",
		"nave-demo-client":  "./examples/demo/client",
		"nave-demo-backend": "./examples/demo/backend",
	})
	code := 1
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		code = m.Run()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

func binary(name string) string { return filepath.Join(bin, name) }
