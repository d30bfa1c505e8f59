package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/navemesh/nave/hub/hubconfig"
	"github.com/navemesh/nave/shared/settings"
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
	if len(blocks) != 3 {
		t.Fatalf("found %d YAML examples, want 2", len(blocks)-1)
	}
	for i, cfg := range []struct {
		program string
		loaded  any
		fresh   any
	}{
		{hubconfig.Program, &hubconfig.Config{}, &hubconfig.Config{}},
		{spokeconfig.Program, &spokeconfig.Config{}, &spokeconfig.Config{}},
	} {
		example, _, _ := strings.Cut(blocks[i+1], "```")
		file := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(file, []byte(example), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := settings.Load(cfg.program, cfg.loaded, []string{"--config", file}, &bytes.Buffer{}); err != nil {
			t.Fatalf("%s example refused: %v", cfg.program, err)
		}
		if err := settings.Load(cfg.program, cfg.fresh, nil, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(cfg.loaded, cfg.fresh) {
			t.Errorf("%s example loads as %+v, want the defaults %+v", cfg.program, cfg.loaded, cfg.fresh)
		}
	}
}
