package main

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/navemesh/nave/cmd/navectl/analyze"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// golden compares got with testdata/golden/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it):\n--- got\n%s--- want\n%s", name, got, want)
	}
}

func TestAnalyzeCleanConfigExitsZero(t *testing.T) {
	r := navectlRun(t, "analyze", "testdata/analyze/clean")
	if r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, "analyzed 2 objects in 1 files (2 other documents skipped): 0 errors, 0 warnings") {
		t.Errorf("analyze of clean config: exit %d, stdout %q, stderr %q; want 0, nothing found", r.code, r.stdout, r.stderr)
	}
	// The demo's own config is clean too.
	if r := navectlRun(t, "analyze", "../../examples/config"); r.code != 0 {
		t.Errorf("analyze of examples/config: exit %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// Every known problem is reported with its file, document, object and
// field, in the golden table; errors exit 1.
func TestAnalyzeFindsKnownProblems(t *testing.T) {
	r := navectlRun(t, "analyze", "testdata/analyze/problems")
	if r.code != 1 || !strings.Contains(r.stderr, "6 errors, 1 warnings") {
		t.Errorf("analyze of problems: exit %d, stderr %q; want 1 with 6 errors and 1 warning", r.code, r.stderr)
	}
	golden(t, "analyze-problems.txt", r.stdout)

	r = navectlRun(t, "analyze", "-o", "json", "testdata/analyze/problems/routes.yaml", "testdata/analyze/problems/rules.yaml")
	var a analyze.Analysis
	if err := json.Unmarshal([]byte(r.stdout), &a); err != nil {
		t.Fatalf("analyze -o json: %v\n%s", err, r.stdout)
	}
	checks := map[string]analyze.Finding{}
	for _, f := range a.Findings {
		checks[f.Check+" "+f.Object] = f
	}
	for key, field := range map[string]string{
		"validation VirtualService shop/bad-weights": "spec.http[0].route",
		"subset VirtualService shop/reviews":         "spec.http[0].route[0].destination.subset",
		"host DestinationRule shop/ratngs":           "spec.host",
		"merge DestinationRule shop/reviews-again":   "spec.host",
	} {
		f, ok := checks[key]
		if !ok || f.Field != field || !strings.HasPrefix(f.Where, "testdata/analyze/problems/") {
			t.Errorf("analyze -o json: %s: %+v; want field %s and its file", key, f, field)
		}
	}
	if a.Files != 2 || a.Objects != 4 || a.Skipped != 1 {
		t.Errorf("analyze -o json counted %d files, %d objects, %d skipped; want 2, 4, 1", a.Files, a.Objects, a.Skipped)
	}
}

func TestAnalyzeWarningsAndStandardInput(t *testing.T) {
	doc, err := os.ReadFile("testdata/analyze/problems/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// rules.yaml alone: the ignored second rule (an error) and the unknown
	// host (a warning); drop the second rule to leave the warning alone.
	onlyWarning := strings.Replace(string(doc), "name: reviews-again", "name: reviews-again\n  namespace: other", 1)
	onlyWarning = strings.Replace(onlyWarning, "  namespace: shop\nspec:\n  host: reviews\n", "spec:\n  host: reviews.shop.svc.cluster.local\n", 1)
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"analyze", "-"}, 0},
		{[]string{"analyze", "--fail-on-warning", "-"}, 1},
	} {
		r := navectlRunInput(t, onlyWarning, c.args...)
		if r.code != c.code || !strings.Contains(r.stdout, "warning") || !strings.Contains(r.stdout, "<stdin>#3") ||
			!strings.Contains(r.stderr, "0 errors, 1 warnings") {
			t.Errorf("navectl %v: exit %d, stdout %q, stderr %q; want %d with one warning on <stdin>#3", c.args, c.code, r.stdout, r.stderr, c.code)
		}
	}
}

// The same VirtualService defined differently in two clusters is reported
// by the hub's rule: the older one wins, the other is named as the loser.
func TestAnalyzeConflictAcrossClusters(t *testing.T) {
	r := navectlRun(t, "analyze", "--cluster", "west=testdata/analyze/clusters/west", "--cluster", "east=testdata/analyze/clusters/east")
	if r.code != 1 {
		t.Errorf("analyze of conflicting clusters: exit %d; want 1", r.code)
	}
	golden(t, "analyze-conflict.txt", r.stdout)
	// One cluster alone has no conflict.
	if r := navectlRun(t, "analyze", "--cluster", "east=testdata/analyze/clusters/east"); r.code != 0 {
		t.Errorf("analyze of east alone: exit %d:\n%s", r.code, r.stdout)
	}
}

func TestAnalyzeUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"analyze"}, 2, "want files, directories"},
		{[]string{"analyze", "--cluster", "east"}, 2, "want NAME=FILE or NAME=DIR"},
		{[]string{"analyze", "-o", "xml", "x"}, 2, `--output "xml"`},
		{[]string{"analyze", "--domain-suffix", "-bad-", "x"}, 2, "--domain-suffix"},
		{[]string{"analyze", "testdata/missing"}, 1, "no such file"},
	} {
		r := navectlRun(t, c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) || r.stdout != "" {
			t.Errorf("navectl %v: exit %d, stdout %q, stderr %q; want exit %d mentioning %q", c.args, r.code, r.stdout, r.stderr, c.code, c.want)
		}
	}
}

// --meshconfig: a refused field is an error naming it; a root namespace
// other than istio-system turns istio-system's mesh-wide config into a
// warning; a clean MeshConfig adds nothing.
func TestAnalyzeMeshConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfgObjs := write("objs.yaml", `apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: istio-system}
spec: {mtls: {mode: STRICT}}
`)
	clean := write("clean.yaml", "outboundTrafficPolicy: {mode: REGISTRY_ONLY}\n")
	if r := navectlRun(t, "analyze", "--meshconfig", clean, cfgObjs); r.code != 0 || !strings.Contains(r.stderr, "0 errors, 0 warnings") {
		t.Errorf("a clean MeshConfig: exit %d, stderr %q", r.code, r.stderr)
	}
	refused := write("refused.yaml", "enableEnvoyAccessLogService: true\n")
	r := navectlRun(t, "analyze", "--meshconfig", refused, cfgObjs)
	if r.code != 1 || !strings.Contains(r.stdout, "meshConfig.enableEnvoyAccessLogService") || !strings.Contains(r.stdout, "not yet supported") {
		t.Errorf("a refused MeshConfig field: exit %d, stdout %q; want 1 naming meshConfig.enableEnvoyAccessLogService", r.code, r.stdout)
	}
	root := write("root.yaml", "rootNamespace: mesh-root\n")
	r = navectlRun(t, "analyze", "--meshconfig", root, cfgObjs)
	if r.code != 0 || !strings.Contains(r.stdout, "root namespace is mesh-root") || !strings.Contains(r.stderr, "0 errors, 1 warnings") {
		t.Errorf("mesh-wide config in istio-system under another root namespace: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := navectlRun(t, "analyze", "--meshconfig", filepath.Join(dir, "missing.yaml"), cfgObjs); r.code == 0 {
		t.Error("a MeshConfig file that does not exist: exit 0")
	}
}

// A port without a declared protocol is sniffed by sidecars: a warning
// (never an error) names the port.
func TestAnalyzeWarnsAboutUndeclaredProtocols(t *testing.T) {
	doc := `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: shop}
spec:
  hosts: [db.example]
  ports: [{number: 3306, name: db}]
  resolution: DNS
`
	r := navectlRunInput(t, doc, "analyze", "-o", "json", "-")
	var a analyze.Analysis
	if err := json.Unmarshal([]byte(r.stdout), &a); err != nil {
		t.Fatalf("analyze -o json: %v\n%s", err, r.stdout)
	}
	if r.code != 0 || len(a.Findings) != 1 || a.Findings[0].Severity != analyze.SevWarning || a.Findings[0].Check != "protocol" ||
		a.Findings[0].Field != "spec.ports[0].protocol" || !strings.Contains(a.Findings[0].Message, "port 3306 declares no protocol") {
		t.Errorf("analyze: exit %d, findings %+v; want exit 0 and one protocol warning for spec.ports[0].protocol", r.code, a.Findings)
	}
}

// TestAnalyzeEnvoyFilters: an EnvoyFilter nave refuses and a WasmPlugin
// are validation errors naming why; a valid one whose patch fails on the
// generated config is an envoyfilter error naming the patch.
func TestAnalyzeEnvoyFilters(t *testing.T) {
	r := navectlRun(t, "analyze", "-o", "json", "testdata/analyze/envoyfilter")
	var a analyze.Analysis
	if err := json.Unmarshal([]byte(r.stdout), &a); err != nil {
		t.Fatalf("analyze -o json: %v\n%s%s", err, r.stdout, r.stderr)
	}
	if r.code != 1 || len(a.Findings) != 3 {
		t.Errorf("exit %d, findings %+v; want 1 with 3 findings", r.code, a.Findings)
	}
	checks := map[string]analyze.Finding{}
	for _, f := range a.Findings {
		checks[f.Check+" "+f.Object] = f
	}
	for key, want := range map[string]struct{ field, reason string }{
		"validation EnvoyFilter shop/replace-listener": {"spec.configPatches[0].patch.operation", "REPLACE is not supported for applyTo LISTENER"},
		"validation WasmPlugin shop/auth":              {"", "WasmPlugin is not supported"},
		"envoyfilter EnvoyFilter shop/wrong-type":      {"spec.configPatches[0]", "cannot merge a type.googleapis.com/envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit"},
	} {
		f, ok := checks[key]
		if !ok || f.Field != want.field || !strings.Contains(f.Message, want.reason) || !strings.HasPrefix(f.Where, "testdata/analyze/envoyfilter/filters.yaml") {
			t.Errorf("%s: %+v; want field %q, a message with %q, and its file", key, f, want.field, want.reason)
		}
	}
}
