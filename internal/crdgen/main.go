// Command crdgen writes deploy/spoke/istio-crds.yaml: the CustomResourceDefinitions of the Istio
// kinds a spoke reads, copied verbatim from the istio.io/api module that go.mod pins:
//
//	go run ./internal/crdgen deploy/spoke/istio-crds.yaml
package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// istioAPIModule holds kubernetes/customresourcedefinitions.gen.yaml, every Istio CRD.
const istioAPIModule = "istio.io/api"

// crdFile is the path of the generated CRDs inside istioAPIModule.
const crdFile = "kubernetes/customresourcedefinitions.gen.yaml"

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: crdgen OUTPUT.yaml")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintf(os.Stderr, "crdgen: %v\n", err)
		os.Exit(1)
	}
}

func run(out string) error {
	dir, version, err := moduleDir(istioAPIModule)
	if err != nil {
		return err
	}
	src, err := os.ReadFile(filepath.Join(dir, crdFile))
	if err != nil {
		return fmt.Errorf("reading the Istio CRDs: %w", err)
	}
	doc, err := render(src, version)
	if err != nil {
		return fmt.Errorf("%s@%s %s: %w", istioAPIModule, version, crdFile, err)
	}
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, doc, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	return nil
}

// moduleDir returns the directory and version of module as the main module's go.mod pins it.
func moduleDir(module string) (dir, version string, err error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}} {{.Version}}", module).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return "", "", fmt.Errorf("go list -m %s: %w: %s", module, err, ee.Stderr)
		}
		return "", "", fmt.Errorf("go list -m %s: %w", module, err)
	}
	dir, version, ok := strings.Cut(strings.TrimSpace(string(out)), " ")
	if !ok || dir == "" || version == "" {
		return "", "", fmt.Errorf("go list -m %s: module not downloaded (run go mod download): %q", module, out)
	}
	return dir, version, nil
}
