package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/navemesh/nave/shared/settings"
)

func TestNewText(t *testing.T) {
	var buf bytes.Buffer
	logger, err := New("warn", "text", &buf)
	if err != nil {
		t.Fatal(err)
	}
	logger.Info("hidden")
	logger.Warn("shown", "cluster", "c1")
	out := buf.String()
	if strings.Contains(out, "hidden") {
		t.Errorf("info line logged at level warn: %q", out)
	}
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "msg=shown") || !strings.Contains(out, "cluster=c1") {
		t.Errorf("unexpected text output %q", out)
	}
}

func TestNewJSON(t *testing.T) {
	var buf bytes.Buffer
	logger, err := New("DEBUG", "json", &buf)
	if err != nil {
		t.Fatal(err)
	}
	logger.Debug("pushed", "proxies", 3)
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("output %q is not one JSON object: %v", buf.String(), err)
	}
	if line["msg"] != "pushed" || line["level"] != "DEBUG" || line["proxies"] != float64(3) {
		t.Errorf("unexpected JSON line %v", line)
	}
}

func TestNewRefusesUnknownValues(t *testing.T) {
	if _, err := New("verbose", "text", &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), `"verbose"`) {
		t.Errorf("level verbose: got %v", err)
	}
	if _, err := New("info", "xml", &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), `"xml"`) {
		t.Errorf("format xml: got %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	type wrapper struct {
		Log Config `key:"log"`
	}
	var cfg wrapper
	if err := settings.Load("test", &cfg, nil, &bytes.Buffer{}); err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
	if cfg.Log != (Config{Level: "info", Format: "text"}) {
		t.Fatalf("defaults %+v", cfg.Log)
	}
	for arg, key := range map[string]string{"--log.level=loud": "log.level", "--log.format=xml": "log.format"} {
		err := settings.Load("test", &cfg, []string{arg}, &bytes.Buffer{})
		var ke *settings.KeyError
		if !errors.As(err, &ke) || ke.Key != key {
			t.Errorf("%s: got %v, want an error naming %s", arg, err, key)
		}
	}
}
