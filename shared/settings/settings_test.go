package settings

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

type testIngest struct {
	StaleGracePeriod time.Duration `key:"staleGracePeriod" default:"10m" help:"how long stale resources stay"`
	Clusters         []string      `key:"clusters" default:"a,b" help:"clusters to accept"`
}

func (i *testIngest) Validate() error {
	if i.StaleGracePeriod <= 0 {
		return Invalid("staleGracePeriod", "must be greater than 0, got %s", i.StaleGracePeriod)
	}
	return nil
}

type testDeep struct {
	HubURL string `key:"hubURL" default:"http://hub" help:"where the hub is"`
}

type testPush struct {
	Deep testDeep `key:"deep" help:"a nested section"`
}

type testConfig struct {
	Name    string     `key:"name" default:"nave" help:"a name"`
	Enabled bool       `key:"enabled" default:"false" help:"a switch"`
	Workers int        `key:"workers" default:"4" help:"a count"`
	Limit   int64      `key:"limit" default:"1099511627776" help:"a big count"`
	Port    uint32     `key:"port" default:"15010" help:"a port"`
	Ratio   float64    `key:"ratio" default:"0.5" help:"a fraction"`
	Mesh    string     `key:"mesh" default:"default" required:"true" help:"a required name"`
	Ingest  testIngest `key:"ingest" help:"ingestion"`
	Push    testPush   `key:"push" help:"pushing"`
}

// Validate checks a rule across sections, reporting both keys it names.
func (c *testConfig) Validate() error {
	if c.Workers < 0 {
		return errors.Join(
			Invalid("workers", "must not be negative"),
			Invalid("push.deep.hubURL", "cannot be used with negative workers"))
	}
	return nil
}

func defaults() testConfig {
	return testConfig{
		Name: "nave", Workers: 4, Limit: 1 << 40, Port: 15010, Ratio: 0.5, Mesh: "default",
		Ingest: testIngest{StaleGracePeriod: 10 * time.Minute, Clusters: []string{"a", "b"}},
		Push:   testPush{Deep: testDeep{HubURL: "http://hub"}},
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func load(t *testing.T, args ...string) (testConfig, error) {
	t.Helper()
	var cfg testConfig
	err := Load("nave-test", &cfg, args, &bytes.Buffer{})
	return cfg, err
}

func keyError(t *testing.T, err error) *KeyError {
	t.Helper()
	var ke *KeyError
	if !errors.As(err, &ke) {
		t.Fatalf("error %v (%T) is not a *KeyError", err, err)
	}
	return ke
}

func TestDefaults(t *testing.T) {
	cfg := testConfig{Name: "overwritten", Workers: 99}
	if err := Load("nave-test", &cfg, nil, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if want := defaults(); !reflect.DeepEqual(cfg, want) {
		t.Fatalf("got %+v, want %+v", cfg, want)
	}
}

func TestPrecedence(t *testing.T) {
	file := writeFile(t, "name: from-file\ningest:\n  staleGracePeriod: 1m\n")
	tests := []struct {
		name     string
		env      string
		flag     string
		wantName string
		wantDur  time.Duration
	}{
		{name: "file over default", wantName: "from-file", wantDur: time.Minute},
		{name: "env over file", env: "2m", wantName: "from-file", wantDur: 2 * time.Minute},
		{name: "flag over env", env: "2m", flag: "3m", wantName: "from-file", wantDur: 3 * time.Minute},
		{name: "flag over file", flag: "3m", wantName: "from-file", wantDur: 3 * time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("NAVE_INGEST_STALE_GRACE_PERIOD", tc.env)
			}
			args := []string{"--config", file}
			if tc.flag != "" {
				args = append(args, "--ingest.stale-grace-period="+tc.flag)
			}
			cfg, err := load(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Name != tc.wantName || cfg.Ingest.StaleGracePeriod != tc.wantDur {
				t.Fatalf("got name %q, grace %s; want %q, %s", cfg.Name, cfg.Ingest.StaleGracePeriod, tc.wantName, tc.wantDur)
			}
			if cfg.Workers != 4 {
				t.Fatalf("workers = %d, want the default 4", cfg.Workers)
			}
		})
	}
}

func TestConfigFileFromEnv(t *testing.T) {
	t.Setenv("NAVE_CONFIG", writeFile(t, "workers: 7\n"))
	cfg, err := load(t)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Workers != 7 {
		t.Fatalf("workers = %d, want 7 from the file named by NAVE_CONFIG", cfg.Workers)
	}
}

func TestEveryTypeParses(t *testing.T) {
	want := testConfig{
		Name: "x", Enabled: true, Workers: 3, Limit: 1 << 50, Port: 4000000000, Ratio: 2.5, Mesh: "m",
		Ingest: testIngest{StaleGracePeriod: 90 * time.Second, Clusters: []string{"c1", "c2"}},
		Push:   testPush{Deep: testDeep{HubURL: "u"}},
	}
	t.Run("flags", func(t *testing.T) {
		cfg, err := load(t, "--name=x", "--enabled", "--workers", "3", "--limit=1125899906842624",
			"--port=4000000000", "--ratio=2.5", "--mesh=m", "--ingest.stale-grace-period=1m30s",
			"--ingest.clusters=c1, c2,", "--push.deep.hub-url=u")
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(cfg, want) {
			t.Fatalf("got %+v, want %+v", cfg, want)
		}
	})
	t.Run("env", func(t *testing.T) {
		for k, v := range map[string]string{
			"NAVE_NAME": "x", "NAVE_ENABLED": "true", "NAVE_WORKERS": "3", "NAVE_LIMIT": "1125899906842624",
			"NAVE_PORT": "4000000000", "NAVE_RATIO": "2.5", "NAVE_MESH": "m",
			"NAVE_INGEST_STALE_GRACE_PERIOD": "1m30s", "NAVE_INGEST_CLUSTERS": "c1,c2",
			"NAVE_PUSH_DEEP_HUB_URL": "u",
		} {
			t.Setenv(k, v)
		}
		cfg, err := load(t)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(cfg, want) {
			t.Fatalf("got %+v, want %+v", cfg, want)
		}
	})
	t.Run("file", func(t *testing.T) {
		file := writeFile(t, `
name: x
enabled: true
workers: 3
limit: 1125899906842624
port: 4000000000
ratio: 2.5
mesh: m
ingest:
  staleGracePeriod: 1m30s
  clusters: [c1, c2]
push:
  deep:
    hubURL: u
`)
		cfg, err := load(t, "--config="+file)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(cfg, want) {
			t.Fatalf("got %+v, want %+v", cfg, want)
		}
	})
	t.Run("file keys are case-insensitive and lists may be comma separated", func(t *testing.T) {
		file := writeFile(t, "Ingest:\n  StaleGracePeriod: 1m30s\n  clusters: \"c1,c2\"\n")
		cfg, err := load(t, "--config="+file)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Ingest.StaleGracePeriod != 90*time.Second || !reflect.DeepEqual(cfg.Ingest.Clusters, []string{"c1", "c2"}) {
			t.Fatalf("got %+v", cfg.Ingest)
		}
	})
	t.Run("explicit false", func(t *testing.T) {
		t.Setenv("NAVE_ENABLED", "true")
		cfg, err := load(t, "--enabled=false")
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Enabled {
			t.Fatal("--enabled=false did not override NAVE_ENABLED=true")
		}
	})
}

func TestBadValuesNameTheKey(t *testing.T) {
	tests := []struct {
		arg, key, reason, source string
	}{
		{"--ingest.stale-grace-period=5x", "ingest.staleGracePeriod", `"5x" is not a duration`, "flag --ingest.stale-grace-period"},
		{"--enabled=maybe", "enabled", `"maybe" is not a boolean`, "flag --enabled"},
		{"--workers=many", "workers", `"many" is not an integer`, "flag --workers"},
		{"--limit=99999999999999999999", "limit", "is out of range", "flag --limit"},
		{"--port=-1", "port", `"-1" is not a non-negative integer`, "flag --port"},
		{"--port=4294967296", "port", "is out of range", "flag --port"},
		{"--ratio=half", "ratio", `"half" is not a number`, "flag --ratio"},
	}
	for _, tc := range tests {
		t.Run(tc.key, func(t *testing.T) {
			_, err := load(t, tc.arg)
			ke := keyError(t, err)
			if ke.Key != tc.key || !strings.Contains(ke.Reason, tc.reason) || ke.Source != tc.source {
				t.Fatalf("got %#v, want key %q, reason containing %q, source %q", ke, tc.key, tc.reason, tc.source)
			}
			if !strings.HasPrefix(err.Error(), tc.key+": ") {
				t.Fatalf("message %q does not start with the key", err)
			}
		})
	}
	t.Run("env", func(t *testing.T) {
		t.Setenv("NAVE_INGEST_STALE_GRACE_PERIOD", "soon")
		_, err := load(t)
		want := `ingest.staleGracePeriod: "soon" is not a duration (from env NAVE_INGEST_STALE_GRACE_PERIOD)`
		if err == nil || err.Error() != want {
			t.Fatalf("got %v, want %s", err, want)
		}
	})
	t.Run("file", func(t *testing.T) {
		file := writeFile(t, "workers: [1, 2]\ningest:\n  staleGracePeriod: 5\n")
		_, err := load(t, "--config", file)
		if err == nil {
			t.Fatal("no error")
		}
		for _, want := range []string{
			"workers: must be a single int, not a list (from config file " + file + ")",
			`ingest.staleGracePeriod: "5" is not a duration (from config file ` + file + ")",
		} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not contain %q", err, want)
			}
		}
	})
}

func TestConfigFileErrors(t *testing.T) {
	tests := []struct {
		name, content, want string
	}{
		{"unknown nested key", "ingest:\n  staleGrace: 5m\n", `unknown key "ingest.staleGrace" (did you mean "ingest.staleGracePeriod"?)`},
		{"unknown top-level key", "Workerz: 3\n", `unknown key "Workerz"`},
		{"unknown section", "ingress:\n  x: 1\n", `unknown key "ingress"`},
		{"section given a scalar", "ingest: 5m\n", `"ingest" must be a mapping of keys`},
		{"not a mapping", "- a\n- b\n", "must be a YAML mapping of keys"},
		{"not YAML", "a: [\n", "yaml"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			file := writeFile(t, tc.content)
			_, err := load(t, "--config", file)
			if err == nil || !strings.Contains(err.Error(), "config file "+file+": ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error about %s containing %q", err, file, tc.want)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		_, err := load(t, "--config", "/nonexistent/nave.yaml")
		if err == nil || !strings.Contains(err.Error(), "/nonexistent/nave.yaml") {
			t.Fatalf("got %v, want an error naming the file", err)
		}
	})
	t.Run("empty file", func(t *testing.T) {
		cfg, err := load(t, "--config", writeFile(t, ""))
		if err != nil || !reflect.DeepEqual(cfg, defaults()) {
			t.Fatalf("got %+v, %v; want the defaults", cfg, err)
		}
	})
}

func TestCommandLineErrors(t *testing.T) {
	if _, err := load(t, "--no-such-flag=1"); err == nil || !strings.Contains(err.Error(), "no-such-flag") {
		t.Fatalf("unknown flag: got %v", err)
	}
	if _, err := load(t, "stray"); err == nil || !strings.Contains(err.Error(), `unexpected argument "stray"`) {
		t.Fatalf("stray argument: got %v", err)
	}
}

func TestHelpListsEveryKey(t *testing.T) {
	for _, arg := range []string{"--help", "-h"} {
		var out bytes.Buffer
		var cfg testConfig
		if err := Load("nave-test", &cfg, []string{arg}, &out); !errors.Is(err, ErrHelp) {
			t.Fatalf("%s: got %v, want ErrHelp", arg, err)
		}
		text := out.String()
		entries := Reference("nave-test", &cfg)
		if len(entries) != 10 {
			t.Fatalf("reference has %d entries, want 10", len(entries))
		}
		for _, e := range entries {
			for _, want := range []string{e.Flag + " " + e.Type, e.Help, "key " + e.Key + ", env " + e.Env + ", default "} {
				if !strings.Contains(text, want) {
					t.Errorf("%s: usage lacks %q:\n%s", arg, want, text)
				}
			}
		}
		for _, want := range []string{"Usage: nave-test", "--config FILE", "NAVE_CONFIG", `default "nave"`, "default 10m", ", required"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s: usage lacks %q", arg, want)
			}
		}
	}
}

func TestValidateErrorsCarryTheFullKey(t *testing.T) {
	_, err := load(t, "--ingest.stale-grace-period=0s")
	ke := keyError(t, err)
	want := KeyError{Key: "ingest.staleGracePeriod", Reason: "must be greater than 0, got 0s", Source: "flag --ingest.stale-grace-period"}
	if *ke != want {
		t.Fatalf("got %#v, want %#v", *ke, want)
	}

	t.Setenv("NAVE_WORKERS", "-1")
	_, err = load(t)
	for _, want := range []string{
		"workers: must not be negative (from env NAVE_WORKERS)",
		"push.deep.hubURL: cannot be used with negative workers",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "hubURL: cannot be used with negative workers (from") {
		t.Errorf("error %q names a source for a default value", err)
	}
}

func TestRequired(t *testing.T) {
	_, err := load(t, "--mesh=")
	ke := keyError(t, err)
	if ke.Key != "mesh" || !strings.Contains(ke.Error(), "mesh: is required") {
		t.Fatalf("got %v", err)
	}
}

func TestProgrammingErrors(t *testing.T) {
	type noTag struct {
		Name string
	}
	type badType struct {
		M map[string]string `key:"m"`
	}
	type badDefault struct {
		D time.Duration `key:"d" default:"soon"`
	}
	type badKey struct {
		N string `key:"Name"`
	}
	type clash struct {
		A  string `key:"aB"`
		A2 struct {
			B string `key:"b"`
		} `key:"a"`
	}
	type reserved struct {
		C string `key:"config"`
	}
	type skipped struct {
		Kept    string `key:"kept" default:"k"`
		Skipped string `key:"-"`
		private string
	}
	for _, cfg := range []any{testConfig{}, &noTag{}, &badType{}, &badDefault{}, &badKey{}, &clash{}, &reserved{}, nil} {
		if err := Load("nave-test", cfg, nil, &bytes.Buffer{}); err == nil {
			t.Errorf("Load(%T) succeeded", cfg)
		}
	}
	var s skipped
	if err := Load("nave-test", &s, nil, &bytes.Buffer{}); err != nil || s.Kept != "k" || s.private != "" {
		t.Fatalf("got %+v, %v", s, err)
	}
}

func TestNames(t *testing.T) {
	tests := []struct{ key, flag, env string }{
		{"ingest.staleGracePeriod", "ingest.stale-grace-period", "NAVE_INGEST_STALE_GRACE_PERIOD"},
		{"xds.defaultMesh", "xds.default-mesh", "NAVE_XDS_DEFAULT_MESH"},
		{"spokes.maxMessageBytes", "spokes.max-message-bytes", "NAVE_SPOKES_MAX_MESSAGE_BYTES"},
		{"hub.hubURLPath", "hub.hub-url-path", "NAVE_HUB_HUB_URL_PATH"},
		{"tls.certV2File", "tls.cert-v2-file", "NAVE_TLS_CERT_V2_FILE"},
		{"mesh", "mesh", "NAVE_MESH"},
	}
	for _, tc := range tests {
		if got := flagName(tc.key); got != tc.flag {
			t.Errorf("flagName(%q) = %q, want %q", tc.key, got, tc.flag)
		}
		if got := envName(tc.key); got != tc.env {
			t.Errorf("envName(%q) = %q, want %q", tc.key, got, tc.env)
		}
	}
}

func TestCheckHostPort(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:15010", ":0", "[::1]:65535", "hub.example:443"} {
		if err := CheckHostPort("listen", ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "127.0.0.1", "host:", "host:http", "host:65536", "host:-1", "a:b:c"} {
		err := CheckHostPort("listen", bad)
		if err == nil || !strings.HasPrefix(err.Error(), "listen: must be host:port") {
			t.Errorf("%q: got %v", bad, err)
		}
	}
}
