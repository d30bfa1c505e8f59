package gentest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// CheckGolden compares got with the golden file at path or, with update,
// writes it there. rerun is the command that rewrites the room's golden
// files, for the failure message.
func CheckGolden(t testing.TB, path string, got []byte, update bool, rerun string) {
	t.Helper()
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from the generators' output; if the change is intended, run\n\t%s\nand review the diff", path, rerun)
	}
}
