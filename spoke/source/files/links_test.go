package files

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/navemesh/nave/shared/meshconfig"
)

// secret stands for anything the spoke can read that is not config: it
// must never reach the rejections or the log.
const secret = "sk_live_51HxQsecretToken"

func TestLinksStayInsideTheDirectory(t *testing.T) {
	outside := t.TempDir()
	write(t, filepath.Join(outside, "token.yaml"), secret+": 1\n")
	write(t, filepath.Join(outside, "valid.yaml"), vsDoc("outside", "outside"))
	write(t, filepath.Join(outside, "conf", "dr.yaml"), drDoc("outside-dir"))

	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), vsDoc("a", "a"))
	// Links to files and directories outside, absolute and relative.
	symlink(t, filepath.Join(outside, "token.yaml"), filepath.Join(dir, "abs-token.yaml"))
	rel, err := filepath.Rel(dir, filepath.Join(outside, "valid.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	symlink(t, rel, filepath.Join(dir, "rel-valid.yaml"))
	symlink(t, filepath.Join(outside, "conf"), filepath.Join(dir, "abs-conf"))
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	symlink(t, filepath.Join("..", rel), filepath.Join(dir, "sub", "up-valid.yaml"))
	// An absolute link, even one into the directory, is not followed.
	symlink(t, filepath.Join(dir, "a.yaml"), filepath.Join(dir, "abs-inside.yaml"))
	// Relative links inside are: a ConfigMap volume's layout, and a plain one.
	write(t, filepath.Join(dir, "..2024_01_01_00_00_00.1", "cm.yaml"), drDoc("cm"))
	symlink(t, "..2024_01_01_00_00_00.1", filepath.Join(dir, "..data"))
	symlink(t, "..data/cm.yaml", filepath.Join(dir, "cm.yaml"))
	symlink(t, "../a.yaml", filepath.Join(dir, "sub", "again.yaml"))

	r := start(t, dir, Options{})
	objs, _ := r.last()
	// sub/again.yaml names a twice: a duplicate of a.yaml's.
	if got, want := keys(objs), "DestinationRule shop/cm, VirtualService shop/a"; got != want {
		t.Errorf("published [%s], want [%s]", got, want)
	}
	rs := r.src.Rejections()
	rejected := map[string]meshconfig.Rejection{}
	for _, rj := range rs {
		rejected[rj.File] = rj
	}
	for _, f := range []string{"abs-conf", "abs-inside.yaml", "abs-token.yaml", "rel-valid.yaml", "sub/up-valid.yaml"} {
		rj, ok := rejected[f]
		if !ok || rj.Index != -1 || !strings.Contains(rj.Reason, "outside the config directory") {
			t.Errorf("rejection of %s = %+v, want the link rule", f, rj)
		}
	}
	if len(rs) != 6 {
		t.Errorf("rejections %+v, want 6 (five links, one duplicate)", rs)
	}
	b, err := json.Marshal(rs)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), secret) || strings.Contains(r.logs.String(), secret) {
		t.Errorf("the linked file's content leaked:\nrejections %s\nlogs %s", b, r.logs.String())
	}
}

func TestGarbledFilesAreNotQuoted(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "good.yaml"), vsDoc("good", "good"))
	write(t, filepath.Join(dir, "garbled.yaml"), strings.Join([]string{
		secret + ": 1\n",
		"API_TOKEN=" + secret + "\n",
		"apiVersion: v1\nkind: Secret\nmetadata: {name: " + secret + "}\ndata: {token: " + secret + "}\n",
		"kind: " + secret + "\n",
		secret + ": 1\n" + secret + ": 2\n",
		"a: !!int " + secret + "\n",
		"a: *" + secret + "\n",
		"? [" + secret + "]\n: v\n",
		"{" + secret + ": [1\n",
	}, "---\n"))
	r := start(t, dir, Options{})
	r.waitForKeys(t, "VirtualService shop/good")
	rs := r.src.Rejections()
	if len(rs) != 9 {
		t.Fatalf("rejections %+v, want 9", rs)
	}
	for _, rj := range rs {
		if rj.File != "garbled.yaml" || !strings.Contains(rj.Reason, "line ") {
			t.Errorf("rejection %+v does not name the file and line", rj)
		}
		if s := fmt.Sprintf("%+v", rj); strings.Contains(s, secret) {
			t.Errorf("rejection quotes the file: %s", s)
		}
	}
	if strings.Contains(r.logs.String(), secret) {
		t.Errorf("the log quotes the file:\n%s", r.logs.String())
	}
}

func TestWalkIsBounded(t *testing.T) {
	t.Run("depth", func(t *testing.T) {
		dir := t.TempDir()
		deep := dir
		for i := range 20 {
			deep = filepath.Join(deep, fmt.Sprintf("d%d", i))
			if i == 2 {
				write(t, filepath.Join(deep, "shallow.yaml"), drDoc("shallow"))
			}
		}
		write(t, filepath.Join(deep, "deep.yaml"), drDoc("deep"))
		r := start(t, dir, Options{})
		if objs, _ := r.last(); keys(objs) != "DestinationRule shop/shallow" {
			t.Errorf("published [%s], want only the shallow one", keys(objs))
		}
		rs := r.src.Rejections()
		if len(rs) != 1 || strings.Count(rs[0].File, "/") != 16 || !strings.Contains(rs[0].Reason, "more than 16 levels") {
			t.Errorf("rejections %+v, want the 17th level named, more than 16 levels", rs)
		}
	})
	t.Run("directories", func(t *testing.T) {
		dir := t.TempDir()
		for i := range 1001 {
			if err := os.Mkdir(filepath.Join(dir, fmt.Sprintf("d%04d", i)), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		src, err := New(dir, Options{}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := src.load(func(string) {}); err == nil || !strings.Contains(err.Error(), "more than 1000 directories") {
			t.Errorf("load of 1002 directories = %v, want the limit", err)
		}
	})
	t.Run("files", func(t *testing.T) {
		dir := t.TempDir()
		for i := range 5 {
			write(t, filepath.Join(dir, fmt.Sprintf("f%d.yaml", i)), "")
		}
		src, err := New(dir, Options{}, nil, nil)
		src.opts.MaxFiles = 4
		if err != nil {
			t.Fatal(err)
		}
		if _, err := src.load(func(string) {}); err == nil || !strings.Contains(err.Error(), "more than 4 YAML files") {
			t.Errorf("load of 5 files = %v, want the limit", err)
		}
	})
}
