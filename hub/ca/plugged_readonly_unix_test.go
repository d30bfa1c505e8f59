//go:build unix

package ca

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// readOnlyDirEnv names, in the child process TestPluggedReadOnly starts,
// the directory holding the read-only plugged-in CA.
const readOnlyDirEnv = "NAVE_TEST_CA_READONLY_DIR"

// TestPluggedReadOnly: a plugged-in CA on a directory the hub cannot
// write to (a read-only Secret volume) loads, and nothing is written
// there. Root ignores directory permissions, so as root the test prepares
// the directory and runs the check in a child process as nobody (a copy
// of this test binary, stopped by its deadline at the latest).
func TestPluggedReadOnly(t *testing.T) {
	if dir := os.Getenv(readOnlyDirEnv); dir != "" {
		before := listing(t, filepath.Join(dir, "m1"))
		newAuthority(t, dir, Options{}, mesh1)
		if after := listing(t, filepath.Join(dir, "m1")); after != before {
			t.Fatalf("loading wrote to the read-only directory: %s, then %s", before, after)
		}
		return
	}
	p := newPluggedCA(t)
	dir := t.TempDir()
	meshDir := filepath.Join(dir, "m1")
	writeFiles(t, meshDir, p.files(t))
	if os.Geteuid() != 0 {
		if err := os.Chmod(meshDir, 0o500); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(meshDir, 0o700) })
		t.Setenv(readOnlyDirEnv, dir)
		TestPluggedReadOnly(t)
		return
	}

	// As root: hand the directory to nobody, read-only, and let nobody
	// reach it and a copy of this binary.
	const nobody = 65534
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := os.ReadDir(meshDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.Chown(filepath.Join(meshDir, e.Name()), nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(meshDir, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(meshDir, 0o500); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "ca.test")
	copyFile(t, os.Args[0], bin)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-test.run=^TestPluggedReadOnly$", "-test.count=1")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), readOnlyDirEnv+"="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the check as nobody failed: %v\n%s", err, out)
	}
}

// listing names dir's entries with their sizes and modification times.
func listing(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var s string
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		s += fmt.Sprintf("%s %d %s; ", e.Name(), info.Size(), info.ModTime())
	}
	return s
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
