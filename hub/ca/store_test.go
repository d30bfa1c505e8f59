package ca

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestDirStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	s, err := NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("store directory: %v, %v; want mode 0700", fi.Mode(), err)
	}
	got, err := s.Get(ctx, "m1")
	if err != nil || len(got) != 0 {
		t.Fatalf("Get of an empty mesh = %v, %v; want an empty map", got, err)
	}

	blobs := map[string][]byte{"a.pem": []byte("A"), "b.pem": []byte("B")}
	if err := s.Create(ctx, "m1", blobs); err != nil {
		t.Fatal(err)
	}
	got, err = s.Get(ctx, "m1")
	if err != nil || len(got) != 2 || string(got["a.pem"]) != "A" || string(got["b.pem"]) != "B" {
		t.Fatalf("Get = %q, %v", got, err)
	}

	// Create refuses when any name exists, and writes none of the set.
	err = s.Create(ctx, "m1", map[string][]byte{"b.pem": []byte("B2"), "c.pem": []byte("C")})
	if !errors.Is(err, ErrExist) {
		t.Fatalf("Create over an existing blob: %v, want ErrExist", err)
	}
	if got, _ := s.Get(ctx, "m1"); len(got) != 2 || string(got["b.pem"]) != "B" {
		t.Fatalf("after a refused Create: %q", got)
	}

	// Hidden, temporary and odd files are not blobs.
	writeFiles(t, s.Location("m1"), map[string][]byte{".a.pem.tmp-1": []byte("x"), "UPPER.pem": []byte("x")})
	if err := os.Mkdir(filepath.Join(s.Location("m1"), "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(ctx, "m1"); len(got) != 2 {
		t.Errorf("Get read non-blobs: %q", got)
	}

	for _, tc := range []struct{ mesh, name string }{
		{"../m1", "a.pem"}, {"m1/x", "a.pem"}, {"", "a.pem"}, {"M1", "a.pem"},
		{"m1", "../a.pem"}, {"m1", ".lock"}, {"m1", "a/b"}, {"m1", ""},
	} {
		if err := s.Create(ctx, tc.mesh, map[string][]byte{tc.name: []byte("x")}); err == nil {
			t.Errorf("Create(%q, %q): no error", tc.mesh, tc.name)
		}
	}
	if _, err := s.Get(ctx, "../m1"); err == nil {
		t.Error("Get(../m1): no error")
	}
	if err := s.Create(ctx, "m2", nil); err == nil {
		t.Error("Create of nothing: no error")
	}
	// An oversized file is refused, not read whole.
	writeFiles(t, s.Location("m3"), map[string][]byte{"big.pem": make([]byte, maxBlobSize+1)})
	if _, err := s.Get(ctx, "m3"); err == nil {
		t.Error("Get of an oversized blob: no error")
	}
}
