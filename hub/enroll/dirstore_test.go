package enroll_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/navemesh/nave/hub/enroll"
)

func openStore(t testing.TB, dir string, opts ...enroll.Option) *enroll.DirStore {
	t.Helper()
	s, err := enroll.OpenDir(dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A DirStore keeps the token hashed, in private files; the rest of the
// contract is testStoreContract's.
func TestDirStoreKeepsTokensHashedAndPrivate(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	tok, info, err := s.CreateToken(t.Context(), "acme", "east", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != enroll.TokenPending || info.Mesh != "acme" || info.Cluster != "east" || !strings.Contains(tok, info.ID) {
		t.Fatalf("CreateToken info = %+v for %s", info, info.ID)
	}
	secret := tok[strings.LastIndex(tok, ".")+1:]
	// Nothing on disk holds the secret; every file is private.
	err = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), secret) {
			t.Errorf("%s holds the token secret", p)
		}
		if st, _ := e.Info(); st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", p, st.Mode().Perm())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// What a redeem writes is private too.
	if _, err := s.Redeem(t.Context(), tok); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(dir, "used", info.ID+".json")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("used token file: %v, %v", st, err)
	}
}

func TestStrayFilesAreIgnored(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	if err := s.Revoke(t.Context(), "acme", "east"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"revoked/.acme.west.json.123", "revoked/README", "clusters/.x.y.json.1", "clusters/notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, p), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	revs, err := s.Revocations(t.Context())
	if err != nil || len(revs) != 1 {
		t.Fatalf("Revocations = %+v, %v; want only acme/east", revs, err)
	}
	if cs, err := s.Clusters(t.Context()); err != nil || len(cs) != 0 {
		t.Fatalf("Clusters = %+v, %v; want none", cs, err)
	}
}
