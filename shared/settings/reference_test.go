package settings

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

func TestReference(t *testing.T) {
	entries := Reference("nave-test", testConfig{})
	var keys []string
	for _, e := range entries {
		keys = append(keys, e.Key)
	}
	wantKeys := []string{"name", "enabled", "workers", "limit", "port", "ratio", "mesh",
		"ingest.staleGracePeriod", "ingest.clusters", "push.deep.hubURL"}
	if !reflect.DeepEqual(keys, wantKeys) {
		t.Fatalf("keys %v, want %v", keys, wantKeys)
	}
	want := Entry{
		Key: "ingest.staleGracePeriod", Flag: "--ingest.stale-grace-period", Env: "NAVE_INGEST_STALE_GRACE_PERIOD",
		Type: "duration", Default: "10m", Help: "how long stale resources stay",
	}
	if entries[7] != want {
		t.Fatalf("got %+v, want %+v", entries[7], want)
	}
	if !entries[6].Required {
		t.Fatal("mesh is not marked required")
	}
}

func TestReferencePanicsOnBadStruct(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "nave-test") {
			t.Fatalf("recovered %v, want a panic naming the program", r)
		}
	}()
	Reference("nave-test", struct{ X string }{})
}

func TestMarkdown(t *testing.T) {
	md := Markdown("nave-test", &testConfig{})
	for _, want := range []string{
		"## nave-test\n",
		"### `ingest`\n\nIngestion.\n",
		"| `ingest.staleGracePeriod` | duration | `10m` | `--ingest.stale-grace-period` | `NAVE_INGEST_STALE_GRACE_PERIOD` | how long stale resources stay |",
		"| `mesh` | string | `default` | `--mesh` | `NAVE_MESH` | a required name (required) |",
		"### `push.deep`\n",
		"```yaml\n",
		"# where the hub is\n    hubURL: \"http://hub\"\n",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "### `push`\n") {
		t.Errorf("markdown has a table for push, which has no keys of its own")
	}
}

// TestDefaultYAMLLoadsAsDefaults proves the example file of the reference is complete and
// correct: loading it yields the defaults, and it sets every key.
func TestDefaultYAMLLoadsAsDefaults(t *testing.T) {
	s, err := newSchema(reflect.TypeFor[testConfig]())
	if err != nil {
		t.Fatal(err)
	}
	text := defaultYAML(s)
	var cfg testConfig
	if err := Load("nave-test", &cfg, []string{"--config", writeFile(t, text)}, &bytes.Buffer{}); err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if !reflect.DeepEqual(cfg, defaults()) {
		t.Fatalf("got %+v, want the defaults", cfg)
	}
	for _, e := range Reference("nave-test", cfg) {
		last := e.Key[strings.LastIndex(e.Key, ".")+1:]
		if !strings.Contains(text, last+": ") {
			t.Errorf("example lacks key %s:\n%s", e.Key, text)
		}
	}
}
