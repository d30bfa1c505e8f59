package files

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/navemesh/nave/shared/meshconfig"
)

// hostIn finds the host the VirtualService name routes to in objs.
func hostIn(objs []*meshconfig.Object, name string) string {
	for _, o := range objs {
		if o.Kind.Kind == "VirtualService" && o.Name == name {
			return hostOf(o)
		}
	}
	return ""
}

// writeAtomic writes a file as editors that save atomically do: a hidden
// temporary file (not loaded), renamed into place, so that no load reads
// it half-written.
func writeAtomic(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	write(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestDuplicateWinnerIgnoresHistory: of objects with one kind, namespace
// and name, the first in path order wins, whether it came first or later,
// so that a restart at any point gives the same objects; a newcomer that
// takes over is reported.
func TestDuplicateWinnerIgnoresHistory(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "we.yaml"), vsDoc("x", "live"))
	r := start(t, dir, Options{Debounce: 10 * time.Millisecond})
	r.waitForKeys(t, "VirtualService shop/x")
	// restarted is what a source started now, with no history, publishes.
	restarted := func() (string, []meshconfig.Rejection) {
		t.Helper()
		fresh := newReloader(t, dir)
		fresh.reload()
		return hostIn(fresh.src.Objects(), "x"), fresh.src.Rejections()
	}
	sameAsRestart := func(step string) {
		t.Helper()
		host, rs := restarted()
		if got := hostIn(r.src.Objects(), "x"); got != host {
			t.Errorf("%s: x routes to %s, and to %s after a restart", step, got, host)
		}
		if got := r.src.Rejections(); fmt.Sprint(got) != fmt.Sprint(rs) {
			t.Errorf("%s: rejections %+v, and %+v after a restart", step, got, rs)
		}
	}

	// A newcomer that sorts after the live file is rejected.
	writeAtomic(t, filepath.Join(dir, "zz-dup.yaml"), drDoc("other")+"---\n"+vsDoc("x", "later"))
	objs := r.waitForKeys(t, "DestinationRule shop/other, VirtualService shop/x")
	if h := hostIn(objs, "x"); h != "live" {
		t.Errorf("x routes to %s after zz-dup.yaml was added, want we.yaml's", h)
	}
	rs := r.src.Rejections()
	if len(rs) != 1 || rs[0].File != "zz-dup.yaml" || rs[0].Index != 1 || rs[0].Name != "x" ||
		!strings.Contains(rs[0].Reason, "first one in path order, at we.yaml#0") {
		t.Fatalf("rejections %+v, want zz-dup.yaml#1 naming the first one at we.yaml#0", rs)
	}
	sameAsRestart("zz-dup.yaml added")

	// A newcomer that sorts first takes over, loudly.
	writeAtomic(t, filepath.Join(dir, "00-dup.yaml"), vsDoc("x", "first"))
	r.waitFor(t, "00-dup.yaml's x", func(objs []*meshconfig.Object) bool { return hostIn(objs, "x") == "first" })
	if !strings.Contains(r.logs.String(), "duplicate config object takes over") {
		t.Errorf("the takeover was not logged:\n%s", r.logs.String())
	}
	rs = r.src.Rejections()
	if len(rs) != 2 || rs[0].File != "we.yaml" || rs[1].File != "zz-dup.yaml" || !strings.Contains(rs[0].Reason, "00-dup.yaml#0") {
		t.Fatalf("rejections %+v, want we.yaml's and zz-dup.yaml's, naming 00-dup.yaml#0", rs)
	}
	sameAsRestart("00-dup.yaml added")

	// An edit of the winner applies; of a loser, changes nothing.
	writeAtomic(t, filepath.Join(dir, "00-dup.yaml"), vsDoc("x", "first-v2"))
	r.waitFor(t, "the edit of 00-dup.yaml", func(objs []*meshconfig.Object) bool { return hostIn(objs, "x") == "first-v2" })
	sameAsRestart("00-dup.yaml edited")

	// Broken YAML in the winner's file: its last good x stays (the one
	// thing a restart cannot know).
	writeAtomic(t, filepath.Join(dir, "00-dup.yaml"), "kind: [unclosed\n")
	r.waitFor(t, "the broken 00-dup.yaml", func([]*meshconfig.Object) bool {
		rs := r.src.Rejections()
		return len(rs) == 3 && rs[0].File == "00-dup.yaml"
	})
	if objs, _ := r.last(); hostIn(objs, "x") != "first-v2" {
		t.Errorf("x routes to %s while 00-dup.yaml is broken, want its last good version", hostIn(objs, "x"))
	}

	// Once the winner's file no longer holds x, the next in path order
	// takes over.
	if err := os.Remove(filepath.Join(dir, "00-dup.yaml")); err != nil {
		t.Fatal(err)
	}
	r.waitFor(t, "we.yaml's x", func(objs []*meshconfig.Object) bool { return hostIn(objs, "x") == "live" })
	sameAsRestart("00-dup.yaml removed")
}
