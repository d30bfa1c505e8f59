package main

import (
	"bytes"
	"encoding/pem"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/navemesh/nave/hub/hubconfig"
	"github.com/navemesh/nave/internal/x509test"
	"github.com/navemesh/nave/shared/settings"
	"github.com/navemesh/nave/spoke/agentconfig"
	"github.com/navemesh/nave/spoke/spokeconfig"
)

func TestConfigDocIsCurrent(t *testing.T) {
	want, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatalf("reading docs/config.md: %v (run make generate)", err)
	}
	if render() != string(want) {
		t.Fatal("docs/config.md is stale: run make generate")
	}
}

// TestExampleFilesLoad loads the default configuration file of each binary, as printed in the
// reference, into its real config struct: the examples must be accepted and yield the defaults.
func TestExampleFilesLoad(t *testing.T) {
	doc := render()
	blocks := strings.Split(doc, "```yaml\n")
	if len(blocks) != 4 {
		t.Fatalf("found %d YAML examples, want 3", len(blocks)-1)
	}
	for i, cfg := range []struct {
		program string
		loaded  any
		fresh   any
		// required are the keys without a default, which the example
		// leaves empty.
		required []string
	}{
		{hubconfig.Program, &hubconfig.Config{}, &hubconfig.Config{}, nil},
		{spokeconfig.Program, &spokeconfig.Config{}, &spokeconfig.Config{}, nil},
		{agentconfig.Program, &agentconfig.Config{}, &agentconfig.Config{}, agentRequired()},
	} {
		example, _, _ := strings.Cut(blocks[i+1], "```")
		file := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(file, []byte(example), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := settings.Load(cfg.program, cfg.loaded, append([]string{"--config", file}, cfg.required...), &bytes.Buffer{}); err != nil {
			t.Fatalf("%s example refused: %v", cfg.program, err)
		}
		if err := settings.Load(cfg.program, cfg.fresh, cfg.required, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(cfg.loaded, cfg.fresh) {
			t.Errorf("%s example loads as %+v, want the defaults %+v", cfg.program, cfg.loaded, cfg.fresh)
		}
	}
}

// agentRequired sets nave-agent's keys that have no default, as an
// injected pod does.
func agentRequired() []string {
	root := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: x509test.NewAuthority("root").Cert.Raw}))
	return []string{"--cluster", "c1", "--pod.name", "p", "--pod.namespace", "ns", "--ra.address", "ra:15023",
		"--ra.identity", "spiffe://cluster.local/nave/cluster/c1", "--trust.mesh-roots", root, "--trust.hub-ca", root, "--xds.address", "hub:15010"}
}
