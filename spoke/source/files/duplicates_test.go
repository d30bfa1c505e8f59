package files

import (
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

// TestDuplicateNewcomerIsRejected: a file added with an object that is
// live already does not take it over, though it sorts first.
func TestDuplicateNewcomerIsRejected(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "we.yaml"), vsDoc("x", "live"))
	r := start(t, dir, Options{Debounce: 10 * time.Millisecond})
	r.waitForKeys(t, "VirtualService shop/x")

	write(t, filepath.Join(dir, "dup.yaml"), drDoc("other")+"---\n"+vsDoc("x", "newcomer"))
	objs := r.waitForKeys(t, "DestinationRule shop/other, VirtualService shop/x")
	if h := hostIn(objs, "x"); h != "live" {
		t.Errorf("x routes to %s after dup.yaml was added, want the live one", h)
	}
	rs := r.src.Rejections()
	if len(rs) != 1 || rs[0].File != "dup.yaml" || rs[0].Index != 1 || rs[0].Name != "x" ||
		!strings.Contains(rs[0].Reason, "we.yaml#0") || !strings.Contains(rs[0].Reason, "live") {
		t.Fatalf("rejections %+v, want dup.yaml#1 naming the live one at we.yaml#0", rs)
	}

	// An edit of the live file still applies; the newcomer stays rejected.
	write(t, filepath.Join(dir, "we.yaml"), vsDoc("x", "live-v2"))
	r.waitFor(t, "the edit of we.yaml", func(objs []*meshconfig.Object) bool { return hostIn(objs, "x") == "live-v2" })
	if rs := r.src.Rejections(); len(rs) != 1 || rs[0].File != "dup.yaml" {
		t.Errorf("rejections %+v after the edit, want dup.yaml's", rs)
	}

	// Broken YAML in the live file: its last good x stays, not the newcomer.
	write(t, filepath.Join(dir, "we.yaml"), "kind: [unclosed\n")
	r.waitFor(t, "the broken we.yaml", func([]*meshconfig.Object) bool {
		rs := r.src.Rejections()
		return len(rs) == 2 && rs[1].File == "we.yaml"
	})
	if objs, _ := r.last(); hostIn(objs, "x") != "live-v2" {
		t.Errorf("x routes to %s while we.yaml is broken, want its last good version", hostIn(objs, "x"))
	}

	// Once the live file no longer holds x, the other one takes over.
	if err := os.Remove(filepath.Join(dir, "we.yaml")); err != nil {
		t.Fatal(err)
	}
	r.waitFor(t, "dup.yaml's x", func(objs []*meshconfig.Object) bool { return hostIn(objs, "x") == "newcomer" })
	if rs := r.src.Rejections(); len(rs) != 0 {
		t.Errorf("rejections %+v, want none", rs)
	}
}
