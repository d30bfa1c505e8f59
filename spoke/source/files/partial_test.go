package files

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/navemesh/nave/shared/debounce"
	"github.com/navemesh/nave/shared/meshconfig"
)

// reloader drives a Source's reloads by hand, with no timers.
type reloader struct {
	t   *testing.T
	src *Source
	w   *fsnotify.Watcher
}

func newReloader(t *testing.T, dir string) *reloader {
	t.Helper()
	src, err := New(dir, Options{Debounce: time.Hour}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return &reloader{t: t, src: src, w: w}
}

// reload reloads now and returns the objects published.
func (r *reloader) reload() string {
	r.t.Helper()
	var got []*meshconfig.Object
	if err := r.src.reload(r.w, false, func(objs []*meshconfig.Object) { got = objs }); err != nil {
		r.t.Fatal(err)
	}
	return keys(got)
}

// advance moves the source's clock d forward, by hand: its last load and
// the withdrawals it holds happened d earlier than they did.
func (r *reloader) advance(d time.Duration) {
	r.src.lastLoad = r.src.lastLoad.Add(-d)
	for k, since := range r.src.held {
		r.src.held[k] = since.Add(-d)
	}
}

// afterWindow reloads once the debounce window has passed since the last.
func (r *reloader) afterWindow() string {
	r.t.Helper()
	r.advance(r.src.opts.Debounce)
	return r.reload()
}

// rewrite writes a file in place, as a non-atomic save does: same file,
// truncated, then written.
func rewrite(t *testing.T, path, content string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestPartialWriteDoesNotWithdraw: a file read while it is rewritten in
// place, cut at a document boundary, withdraws nothing until it has stayed
// that way for a debounce window; adds and updates apply at once.
func TestPartialWriteDoesNotWithdraw(t *testing.T) {
	const both = "DestinationRule shop/rest, VirtualService shop/x"
	dir := t.TempDir()
	path := filepath.Join(dir, "we.yaml")
	whole, prefix := vsDoc("x", "x")+"---\n"+drDoc("rest"), vsDoc("x", "x")+"---\n"
	write(t, path, whole)
	r := newReloader(t, dir)
	if got := r.reload(); got != both {
		t.Fatalf("first load [%s]", got)
	}

	t.Run("cut, then completed", func(t *testing.T) {
		rewrite(t, path, prefix)
		if got := r.reload(); got != both {
			t.Fatalf("reading the half-written file published [%s], want [%s]", got, both)
		}
		if got := r.reload(); got != both {
			t.Fatalf("reading it again within the window published [%s], want [%s]", got, both)
		}
		rewrite(t, path, whole)
		if got := r.afterWindow(); got != both {
			t.Fatalf("once whole [%s]", got)
		}
		if got := r.afterWindow(); got != both {
			t.Fatalf("once whole, again [%s]", got)
		}
	})
	t.Run("updates apply at once", func(t *testing.T) {
		rewrite(t, path, vsDoc("x", "x-v2")+"---\n")
		r.reload()
		if objs := r.src.Objects(); hostIn(objs, "x") != "x-v2" || keys(objs) != both {
			t.Fatalf("after an update of x in the half-written file: [%s], x routes to %s", keys(objs), hostIn(objs, "x"))
		}
		rewrite(t, path, whole)
		r.afterWindow()
	})
	t.Run("cut and stable", func(t *testing.T) {
		rewrite(t, path, prefix)
		if got := r.reload(); got != both {
			t.Fatalf("half-written [%s]", got)
		}
		if got := r.afterWindow(); got != "VirtualService shop/x" {
			t.Fatalf("the file stayed cut for a window: [%s], want rest withdrawn", got)
		}
		rewrite(t, path, whole)
		if got := r.reload(); got != both {
			t.Fatalf("adding rest back [%s]", got)
		}
	})
	t.Run("deleted", func(t *testing.T) {
		if err := os.Rename(path, filepath.Join(dir, ".we.yaml.bak")); err != nil {
			t.Fatal(err)
		}
		if got := r.reload(); got != both {
			t.Fatalf("just after the file went away [%s], want [%s]", got, both)
		}
		if got := r.afterWindow(); got != "" {
			t.Fatalf("the file stayed away for a window: [%s], want nothing", got)
		}
		if err := os.Rename(filepath.Join(dir, ".we.yaml.bak"), path); err != nil {
			t.Fatal(err)
		}
		if got := r.reload(); got != both {
			t.Fatalf("back [%s]", got)
		}
	})
	t.Run("never stable", func(t *testing.T) {
		// A file that keeps changing holds a withdrawal at most ten
		// windows.
		content := prefix
		for i := 0; ; i++ {
			content += "# still writing\n"
			rewrite(t, path, content)
			got := r.reload()
			if got == "VirtualService shop/x" {
				// Held since the first round, half a window apart.
				if i != 2*maxHoldWindows {
					t.Fatalf("withdrawn at round %d, want %d (after %d windows)", i, 2*maxHoldWindows, maxHoldWindows)
				}
				break
			}
			if got != both || i > 1000 {
				t.Fatalf("round %d: [%s]", i, got)
			}
			r.advance(r.src.opts.Debounce / 2)
		}
	})
}

// TestNonAtomicSaveUnderRun: the same through Run and its timers, with a
// writer that pauses at a document boundary longer than the debounce. No
// publication may lack an object, whatever the timing. A save proves the
// rule only if a reload landed inside the writer's pause (logged as a
// deferred withdrawal) and the pause stayed under two windows; the save
// is repeated until one does, at most five times. On the leading edge the
// reload at the save's first event reads the file cut: it must hold the
// withdrawal as the trailing one does.
func TestNonAtomicSaveUnderRun(t *testing.T) {
	for _, edge := range []debounce.Edge{debounce.Trailing, debounce.Leading} {
		t.Run(string(edge), func(t *testing.T) { nonAtomicSaveUnderRun(t, edge) })
	}
}

func nonAtomicSaveUnderRun(t *testing.T, edge debounce.Edge) {
	const debounce = 200 * time.Millisecond
	const both = "DestinationRule shop/rest, VirtualService shop/x"
	dir := t.TempDir()
	path := filepath.Join(dir, "we.yaml")
	write(t, path, vsDoc("x", "x")+"---\n"+drDoc("rest"))
	r := start(t, dir, Options{Debounce: debounce, DebounceEdge: edge})
	r.waitForKeys(t, both)

	var timings []string
	for attempt := range 5 {
		_, before := r.last()
		deferred := strings.Count(r.logs.String(), "withdrawal deferred")
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(vsDoc("x", "x") + "---\n"); err != nil {
			t.Fatal(err)
		}
		cut := time.Now()
		time.Sleep(debounce * 3 / 2)
		if _, err := f.WriteString(drDoc("rest")); err != nil {
			t.Fatal(err)
		}
		paused := time.Since(cut)
		f.Close()
		time.Sleep(3 * debounce)

		r.mu.Lock()
		sets := r.published[before:]
		r.mu.Unlock()
		for i, objs := range sets {
			if keys(objs) != both {
				t.Fatalf("save %d, publish %d: [%s], want [%s]", attempt, i, keys(objs), both)
			}
		}
		landed := strings.Count(r.logs.String(), "withdrawal deferred") > deferred
		if landed && paused < 2*debounce-debounce/4 && len(sets) > 0 {
			return
		}
		timings = append(timings, fmt.Sprintf("save %d: paused %s, reload inside the pause %v, %d publications", attempt, paused, landed, len(sets)))
	}
	t.Fatalf("no save had a reload inside its pause, so the rule was never exercised:\n%s\n%s", strings.Join(timings, "\n"), r.logs.String())
}
