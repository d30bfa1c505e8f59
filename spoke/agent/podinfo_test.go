package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParsePodInfo(t *testing.T) {
	got, err := ParsePodInfo([]byte("app=\"web\"\npod-template-hash=\"7d\\\"x\\n\"\n\nversion=\"\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got["app"] != "web" || got["pod-template-hash"] != "7d\"x\n" || got["version"] != "" {
		t.Errorf("parsed %q", got)
	}
	for _, c := range []struct{ in, want string }{
		{"app", "line 1: want key=\"value\""},
		{"a=\"1\"\n=\"x\"", "line 2"},
		{"app=web", "line 1 (app): the value is not a quoted string"},
		{"app=\"web", "not a quoted string"},
	} {
		if _, err := ParsePodInfo([]byte(c.in)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err %v; want one saying %q", c.in, err, c.want)
		}
	}
}

func TestReadPodInfo(t *testing.T) {
	dir := t.TempDir()
	if m, err := readPodInfo(filepath.Join(dir, "missing")); err != nil || len(m) != 0 {
		t.Errorf("missing file: %v %v; want no entries", m, err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, []byte(strings.Repeat("a=\"b\"\n", maxPodInfoBytes/6+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readPodInfo(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("oversized file: %v", err)
	}
}

func FuzzParsePodInfo(f *testing.F) {
	for _, s := range []string{"app=\"web\"\n", "a=\"\\u00e9\"\nb=\"x\"", "=", "a=b", "a=\"\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParsePodInfo(data)
		if err != nil {
			return
		}
		for k := range m {
			if k == "" || strings.ContainsAny(k, "\n=") {
				t.Errorf("key %q accepted", k)
			}
		}
	})
}
