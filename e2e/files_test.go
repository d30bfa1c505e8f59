package e2e

// Harness: files, written as an editor saves them.

import (
	"os"
	"path/filepath"
	"testing"
)

func mkdirAll(dir string) error { return os.MkdirAll(dir, 0o755) }

// writeFile writes atomically (temp file + rename), as editors and
// Kubernetes ConfigMap updates do.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
