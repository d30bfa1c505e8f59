package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/internal/testwait"
)

// TestInvalidConfigExits runs each binary with a bad value: it must exit
// non-zero at once, naming the key and the reason.
func TestInvalidConfigExits(t *testing.T) {
	cfgFile := filepath.Join(t.TempDir(), "hub.yaml")
	if err := os.WriteFile(cfgFile, []byte("ingest:\n  staleGracePeriod: soon\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		bin  string
		args []string
		env  []string
		want []string
	}{
		{"nave-hub", []string{"--ingest.stale-grace-period", "5x"}, nil, []string{"ingest.staleGracePeriod", "5x"}},
		{"nave-hub", []string{"--config", cfgFile}, nil, []string{"ingest.staleGracePeriod", "soon"}},
		{"nave-hub", nil, []string{"NAVE_XDS_LISTEN=nowhere"}, []string{"xds.listen"}},
		{"nave-spoke", []string{"--source", "http://x"}, nil, []string{"source", "fs://"}},
		{"nave-spoke", []string{"--cluster", "Not_A_Label"}, nil, []string{"cluster"}},
		{"nave-agent", nil, []string{"NAVE_POD_NAME=web-1"}, []string{"ra.address", "trust.meshRoots", "xds.address"}},
		{"nave-agent", []string{"capture"}, nil, []string{"capture", "no flags given"}},
	}
	for _, c := range cases {
		cmd := exec.Command(binary(c.bin), c.args...)
		cmd.Env = append(os.Environ(), c.env...)
		out, err := cmd.CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() == 0 {
			t.Errorf("%s %v: err %v, want a non-zero exit; output: %s", c.bin, c.args, err, out)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%s %v %v: output %q does not name %q", c.bin, c.args, c.env, out, w)
			}
		}
	}
}

// TestHelpListsEveryKey checks that --help names every key of docs/config.md.
func TestHelpListsEveryKey(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(harness.ModuleRoot(), "docs", "config.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, bin := range []string{"nave-hub", "nave-spoke", "nave-agent"} {
		out, err := exec.Command(binary(bin), "--help").CombinedOutput()
		if err != nil {
			t.Fatalf("%s --help: %v\n%s", bin, err, out)
		}
		for _, flag := range regexp.MustCompile(`--[a-z][a-z0-9.-]+`).FindAllString(string(out), -1) {
			if flag != "--config" && flag != "--help" && !strings.Contains(string(doc), "`"+flag) {
				t.Errorf("%s --help lists %s, which docs/config.md does not document", bin, flag)
			}
		}
	}
}

// TestMetricsAreDocumented scrapes both binaries and checks that every
// nave_ metric they expose is listed in docs/metrics.md. The spoke runs
// with fallback on, so it reports the engine's side-neutral metrics too
// (decision 022).
func TestMetricsAreDocumented(t *testing.T) {
	h := newHub(t)
	sp := newFallbackSpoke(t, h, "metrics", t.TempDir())
	testwait.For(t, 20*time.Second, func() error {
		return harness.GetJSON(sp.url("/debug/uplink"), new(map[string]any))
	})
	for _, page := range []string{h.url("/metrics"), sp.url("/metrics")} {
		for _, name := range []string{"nave_xds_connections", "nave_pushctx_builds_total"} {
			if _, err := metric(page, name); err != nil {
				t.Errorf("the engine's metrics: %v", err)
			}
		}
	}
	assertMetricsDocumented(t, h.url("/metrics"), sp.url("/metrics"))
}
