package kubetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// GatewayAPIModule is the module of the Gateway API CRDs GatewayAPICRDs reads.
const GatewayAPIModule = "sigs.k8s.io/gateway-api"

// GatewayAPICRDs returns the Gateway API project's standard-channel
// CustomResourceDefinitions (config/crd/standard of the module version
// go.mod requires, from the module cache), one manifest each, for Apply.
// The safe-upgrades ValidatingAdmissionPolicy beside them is left out.
func GatewayAPICRDs(t testing.TB) [][]byte {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", GatewayAPIModule).Output()
	if err != nil {
		t.Fatalf("locate %s: %v", GatewayAPIModule, err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "standard")
	files, err := filepath.Glob(filepath.Join(dir, "gateway.networking.k8s.io_*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Gateway API CRDs in %s (%v)", dir, err)
	}
	var crds [][]byte
	for _, f := range files {
		if strings.Contains(filepath.Base(f), "_vap_") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		crds = append(crds, b)
	}
	return crds
}
