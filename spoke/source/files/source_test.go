package files

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/internal/testlog"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/shared/meshconfig"
)

const waitTimeout = 10 * time.Second

// vsDoc is a valid VirtualService named name, routing to host.
func vsDoc(name, host string) string {
	return "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: " + name + ", namespace: shop}\n" +
		"spec:\n  hosts: [" + name + "]\n  http: [{route: [{destination: {host: " + host + "}}]}]\n"
}

// drDoc is a valid DestinationRule named name.
func drDoc(name string) string {
	return "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: " + name + ", namespace: shop}\nspec: {host: " + name + "}\n"
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// keys renders objects as "Kind namespace/name" in order.
func keys(objs []*meshconfig.Object) string {
	var out []string
	for _, o := range objs {
		out = append(out, o.Kind.Kind+" "+o.Key())
	}
	return strings.Join(out, ", ")
}

// hostOf is the first destination host of a VirtualService.
func hostOf(o *meshconfig.Object) string {
	return o.Spec.(*networkingv1alpha3.VirtualService).GetHttp()[0].GetRoute()[0].GetDestination().GetHost()
}

// running is a Source under Run, with what it published.
type running struct {
	src  *Source
	reg  *prometheus.Registry
	logs *syncBuffer

	mu        sync.Mutex
	published [][]*meshconfig.Object
	notify    chan struct{}
}

func start(t *testing.T, dir string, opts Options) *running {
	t.Helper()
	if opts.Debounce == 0 {
		opts.Debounce = 20 * time.Millisecond
	}
	r := &running{reg: prometheus.NewRegistry(), logs: &syncBuffer{}, notify: make(chan struct{}, 1)}
	logger := slog.New(slog.NewJSONHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	src, err := New(dir, opts, logger, r.reg)
	if err != nil {
		t.Fatal(err)
	}
	r.src = src
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var inflight atomic.Int32
	go func() {
		done <- src.Run(ctx, func(objs []*meshconfig.Object) {
			if inflight.Add(1) != 1 {
				t.Error("publish called concurrently")
			}
			defer inflight.Add(-1)
			r.mu.Lock()
			r.published = append(r.published, objs)
			r.mu.Unlock()
			select {
			case r.notify <- struct{}{}:
			default:
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(waitTimeout):
			t.Error("Run did not return after cancel")
		}
	})
	r.waitFor(t, "the first load", func([]*meshconfig.Object) bool { return true })
	return r
}

// last returns the last published set and how many there were.
func (r *running) last() ([]*meshconfig.Object, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.published) == 0 {
		return nil, 0
	}
	return r.published[len(r.published)-1], len(r.published)
}

// waitFor polls, until a deadline, for a published set that satisfies cond.
func (r *running) waitFor(t *testing.T, what string, cond func([]*meshconfig.Object) bool) []*meshconfig.Object {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		if objs, n := r.last(); n > 0 && cond(objs) {
			return objs
		}
		select {
		case <-r.notify:
		case <-deadline:
			objs, _ := r.last()
			t.Fatalf("timed out waiting for %s; last published: [%s]; rejections: %+v", what, keys(objs), r.src.Rejections())
		}
	}
}

func (r *running) waitForKeys(t *testing.T, want string) []*meshconfig.Object {
	t.Helper()
	return r.waitFor(t, "objects ["+want+"]", func(objs []*meshconfig.Object) bool { return keys(objs) == want })
}

type syncBuffer = testlog.Buffer

func TestLoadsNestedDirectories(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "top.yaml"), vsDoc("a", "a"))
	write(t, filepath.Join(dir, "sub", "dr.yml"), drDoc("b"))
	write(t, filepath.Join(dir, "sub", "deeper", "more.YAML"), vsDoc("c", "c")+"---\n# nothing\n---\n"+drDoc("d"))
	write(t, filepath.Join(dir, "notes.txt"), vsDoc("ignored-txt", "x"))
	write(t, filepath.Join(dir, ".hidden.yaml"), vsDoc("ignored-hidden", "x"))
	write(t, filepath.Join(dir, ".git", "x.yaml"), vsDoc("ignored-git", "x"))

	r := start(t, dir, Options{})
	objs, _ := r.last()
	if got, want := keys(objs), "DestinationRule shop/b, DestinationRule shop/d, VirtualService shop/a, VirtualService shop/c"; got != want {
		t.Fatalf("published [%s], want [%s]", got, want)
	}
	origins := map[string]string{}
	for _, o := range objs {
		origins[o.Name] = o.Origin
	}
	want := map[string]string{"a": "top.yaml#0", "b": "sub/dr.yml#0", "c": "sub/deeper/more.YAML#0", "d": "sub/deeper/more.YAML#2"}
	for name, origin := range want {
		if origins[name] != origin {
			t.Errorf("%s comes from %q, want %q", name, origins[name], origin)
		}
	}
	if !r.src.Loaded() {
		t.Error("Loaded() = false after the first publish")
	}
	if got := keys(r.src.Objects()); got != keys(objs) {
		t.Errorf("Objects() = [%s], want [%s]", got, keys(objs))
	}
	if rs := r.src.Rejections(); len(rs) != 0 {
		t.Errorf("rejections: %+v", rs)
	}
}

func TestReloads(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(t *testing.T, dir string)
		change func(t *testing.T, dir string, r *running)
		before string
		after  string
		check  func(t *testing.T, objs []*meshconfig.Object)
	}{
		{
			name:   "edit",
			setup:  func(t *testing.T, dir string) { write(t, filepath.Join(dir, "vs.yaml"), vsDoc("a", "v1")) },
			change: func(t *testing.T, dir string, _ *running) { write(t, filepath.Join(dir, "vs.yaml"), vsDoc("a", "v2")) },
			before: "VirtualService shop/a",
			after:  "VirtualService shop/a",
			check: func(t *testing.T, objs []*meshconfig.Object) {
				if h := hostOf(objs[0]); h != "v2" {
					t.Errorf("host = %s, want v2", h)
				}
			},
		},
		{
			name:   "create",
			setup:  func(t *testing.T, dir string) { write(t, filepath.Join(dir, "a.yaml"), vsDoc("a", "a")) },
			change: func(t *testing.T, dir string, _ *running) { write(t, filepath.Join(dir, "b.yaml"), drDoc("b")) },
			before: "VirtualService shop/a",
			after:  "DestinationRule shop/b, VirtualService shop/a",
		},
		{
			name: "delete",
			setup: func(t *testing.T, dir string) {
				write(t, filepath.Join(dir, "a.yaml"), vsDoc("a", "a"))
				write(t, filepath.Join(dir, "sub", "b.yaml"), drDoc("b"))
			},
			change: func(t *testing.T, dir string, _ *running) {
				if err := os.Remove(filepath.Join(dir, "sub", "b.yaml")); err != nil {
					t.Fatal(err)
				}
			},
			before: "DestinationRule shop/b, VirtualService shop/a",
			after:  "VirtualService shop/a",
		},
		{
			name:  "rename into place",
			setup: func(t *testing.T, dir string) { write(t, filepath.Join(dir, "vs.yaml"), vsDoc("a", "v1")) },
			change: func(t *testing.T, dir string, _ *running) {
				// An editor's save: write a hidden temporary file, rename it over.
				tmp := filepath.Join(dir, ".vs.yaml.tmp")
				write(t, tmp, vsDoc("a", "v2")+"---\n"+drDoc("b"))
				if err := os.Rename(tmp, filepath.Join(dir, "vs.yaml")); err != nil {
					t.Fatal(err)
				}
			},
			before: "VirtualService shop/a",
			after:  "DestinationRule shop/b, VirtualService shop/a",
			check: func(t *testing.T, objs []*meshconfig.Object) {
				if h := hostOf(objs[1]); h != "v2" {
					t.Errorf("host = %s, want v2", h)
				}
			},
		},
		{
			name: "new subdirectory",
			setup: func(t *testing.T, dir string) {
				write(t, filepath.Join(dir, "a.yaml"), vsDoc("a", "a"))
			},
			change: func(t *testing.T, dir string, r *running) {
				_, n := r.last()
				if err := os.Mkdir(filepath.Join(dir, "new"), 0o755); err != nil {
					t.Fatal(err)
				}
				// Once the new directory's reload is done, the file below
				// is a change inside a directory that must now be watched.
				r.waitFor(t, "the reload after mkdir", func([]*meshconfig.Object) bool { _, m := r.last(); return m > n })
				write(t, filepath.Join(dir, "new", "deeper", "b.yaml"), drDoc("b"))
			},
			before: "VirtualService shop/a",
			after:  "DestinationRule shop/b, VirtualService shop/a",
		},
		{
			name: "configmap data swap",
			setup: func(t *testing.T, dir string) {
				// Kubernetes' ConfigMap volume layout: the files live in a
				// timestamped directory, "..data" links to it, and every
				// visible entry links through "..data".
				write(t, filepath.Join(dir, "..2024_01_01_00_00_00.1", "vs.yaml"), vsDoc("a", "v1"))
				write(t, filepath.Join(dir, "..2024_01_01_00_00_00.1", "conf", "dr.yaml"), drDoc("b"))
				symlink(t, "..2024_01_01_00_00_00.1", filepath.Join(dir, "..data"))
				symlink(t, "..data/vs.yaml", filepath.Join(dir, "vs.yaml"))
				symlink(t, "..data/conf", filepath.Join(dir, "conf"))
			},
			change: func(t *testing.T, dir string, _ *running) {
				// The kubelet's atomic update: a new directory, a new link
				// renamed over "..data", the old directory removed.
				write(t, filepath.Join(dir, "..2024_01_02_00_00_00.2", "vs.yaml"), vsDoc("a", "v2"))
				write(t, filepath.Join(dir, "..2024_01_02_00_00_00.2", "conf", "dr.yaml"), drDoc("c"))
				symlink(t, "..2024_01_02_00_00_00.2", filepath.Join(dir, "..data_tmp"))
				if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
					t.Fatal(err)
				}
				if err := os.RemoveAll(filepath.Join(dir, "..2024_01_01_00_00_00.1")); err != nil {
					t.Fatal(err)
				}
			},
			before: "DestinationRule shop/b, VirtualService shop/a",
			after:  "DestinationRule shop/c, VirtualService shop/a",
			check: func(t *testing.T, objs []*meshconfig.Object) {
				if h := hostOf(objs[1]); h != "v2" {
					t.Errorf("host = %s, want v2", h)
				}
				if objs[0].Origin != "conf/dr.yaml#0" || objs[1].Origin != "vs.yaml#0" {
					t.Errorf("origins %q, %q; want the visible names", objs[0].Origin, objs[1].Origin)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.setup(t, dir)
			r := start(t, dir, Options{})
			if objs, _ := r.last(); keys(objs) != tt.before {
				t.Fatalf("first load published [%s], want [%s]", keys(objs), tt.before)
			}
			tt.change(t, dir, r)
			objs := r.waitFor(t, tt.name, func(objs []*meshconfig.Object) bool {
				if keys(objs) != tt.after {
					return false
				}
				if tt.name == "edit" {
					return hostOf(objs[0]) == "v2"
				}
				return true
			})
			if tt.check != nil {
				tt.check(t, objs)
			}
			if rs := r.src.Rejections(); len(rs) != 0 {
				t.Errorf("rejections: %+v", rs)
			}
		})
	}
}

func TestGarbageFilesAreRejectedAndTheRestPublishes(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "good.yaml"), vsDoc("good", "good"))
	write(t, filepath.Join(dir, "binary.yaml"), "\x7fELF\x02\x01\x01\x00\x00\x00\xff\xfe\x00garbage")
	write(t, filepath.Join(dir, "broken.yaml"), drDoc("kept")+"---\nspec: {host: [unclosed\n---\n"+vsDoc("also-kept", "x"))
	huge := bytes.Repeat([]byte("# padding padding padding padding padding padding padding padding\n"), 10<<20/66+1)
	write(t, filepath.Join(dir, "huge.yaml"), string(huge))
	symlink(t, "loop-b.yaml", filepath.Join(dir, "loop-a.yaml"))
	symlink(t, "loop-a.yaml", filepath.Join(dir, "loop-b.yaml"))
	write(t, filepath.Join(dir, "sub", "inner.yaml"), drDoc("inner"))
	symlink(t, "..", filepath.Join(dir, "sub", "up"))

	r := start(t, dir, Options{MaxFileBytes: 1 << 20})
	objs, _ := r.last()
	if got, want := keys(objs), "DestinationRule shop/inner, DestinationRule shop/kept, VirtualService shop/also-kept, VirtualService shop/good"; got != want {
		t.Errorf("published [%s], want [%s]", got, want)
	}
	type rej struct {
		file   string
		index  int
		reason string
	}
	want := []rej{
		{"binary.yaml", 0, "not UTF-8"},
		{"broken.yaml", 1, "invalid YAML"},
		{"huge.yaml", -1, "bytes, larger than the limit 1048576"},
		{"loop-a.yaml", -1, "cannot follow symlink: too many levels of symbolic links"},
		{"loop-b.yaml", -1, "cannot follow symlink: too many levels of symbolic links"},
		{"sub/up", -1, `directory already loaded as "."`},
	}
	got := r.src.Rejections()
	if len(got) != len(want) {
		t.Fatalf("rejections %+v, want %d", got, len(want))
	}
	for i, w := range want {
		if got[i].File != w.file || got[i].Index != w.index || !strings.Contains(got[i].Reason, w.reason) {
			t.Errorf("rejection %d = %+v, want %s#%d ...%q...", i, got[i], w.file, w.index, w.reason)
		}
	}
	if !strings.HasPrefix(got[2].Reason, "file is "+strconv.Itoa(len(huge))+" bytes") {
		t.Errorf("huge file reason %q does not give its size %d", got[2].Reason, len(huge))
	}
}

func TestDuplicatesFirstInPathOrderWins(t *testing.T) {
	dir := t.TempDir()
	// Path order: "a.yaml" < "a/b.yaml" < "b/c.yaml", although a directory
	// walk reaches "a/b.yaml" first.
	write(t, filepath.Join(dir, "a.yaml"), vsDoc("x", "first")+"---\n"+drDoc("x"))
	write(t, filepath.Join(dir, "a", "b.yaml"), vsDoc("x", "second"))
	write(t, filepath.Join(dir, "b", "c.yaml"), drDoc("other")+"---\n"+vsDoc("x", "third"))

	r := start(t, dir, Options{})
	objs, _ := r.last()
	if got, want := keys(objs), "DestinationRule shop/other, DestinationRule shop/x, VirtualService shop/x"; got != want {
		t.Fatalf("published [%s], want [%s]; rejections %+v", got, want, r.src.Rejections())
	}
	if h := hostOf(objs[2]); h != "first" {
		t.Errorf("kept the VirtualService routing to %s, want the one in a.yaml", h)
	}
	rs := r.src.Rejections()
	if len(rs) != 2 {
		t.Fatalf("rejections %+v, want 2", rs)
	}
	for i, want := range []struct {
		file  string
		index int
	}{{"a/b.yaml", 0}, {"b/c.yaml", 1}} {
		if rs[i].File != want.file || rs[i].Index != want.index || rs[i].Kind != "VirtualService" || rs[i].Name != "x" || rs[i].Namespace != "shop" {
			t.Errorf("rejection %d = %+v, want %s#%d VirtualService shop/x", i, rs[i], want.file, want.index)
		}
		if !strings.Contains(rs[i].Reason, "a.yaml#0") {
			t.Errorf("reason %q does not say where the first one is", rs[i].Reason)
		}
	}
}

func TestRejectionsAreLoggedAndCounted(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), vsDoc("a", "a")+"---\nkind: Nope\n---\n- list\n")
	write(t, filepath.Join(dir, "b.yaml"), drDoc("b"))
	r := start(t, dir, Options{})

	if n := strings.Count(r.logs.String(), `"msg":"config object rejected"`); n != 2 {
		t.Errorf("logged %d rejections, want 2 (once each per load):\n%s", n, r.logs.String())
	}
	if !strings.Contains(r.logs.String(), `"file":"a.yaml","index":2`) {
		t.Errorf("rejection log lacks file and index:\n%s", r.logs.String())
	}
	expected := `
# HELP nave_spoke_config_loads_total Loads of the config directory.
# TYPE nave_spoke_config_loads_total counter
nave_spoke_config_loads_total 1
# HELP nave_spoke_config_rejected_objects Config objects and files rejected by the last load.
# TYPE nave_spoke_config_rejected_objects gauge
nave_spoke_config_rejected_objects 2
# HELP nave_spoke_config_rejections_total Config objects and files rejected, counted at every load.
# TYPE nave_spoke_config_rejections_total counter
nave_spoke_config_rejections_total 2
`
	if err := testutil.GatherAndCompare(r.reg, strings.NewReader(expected),
		"nave_spoke_config_loads_total", "nave_spoke_config_rejected_objects", "nave_spoke_config_rejections_total"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(r.reg, "nave_spoke_config_load_duration_seconds"); err != nil || n != 1 {
		t.Errorf("load duration histogram: %d series, %v", n, err)
	}
	if got := testutil.ToFloat64(r.src.metrics.objects.WithLabelValues("VirtualService")); got != 1 {
		t.Errorf("VirtualService gauge = %v, want 1", got)
	}
	if got := testutil.ToFloat64(r.src.metrics.objects.WithLabelValues("Gateway")); got != 0 {
		t.Errorf("Gateway gauge = %v, want 0", got)
	}

	// Fixing the file clears the rejections; the counter keeps its count.
	write(t, filepath.Join(dir, "a.yaml"), vsDoc("a", "a"))
	r.waitFor(t, "a reload", func([]*meshconfig.Object) bool { return len(r.src.Rejections()) == 0 })
	if got := testutil.ToFloat64(r.src.metrics.rejected); got != 0 {
		t.Errorf("rejected gauge = %v after the fix, want 0", got)
	}
	if got := testutil.ToFloat64(r.src.metrics.rejections); got < 2 {
		t.Errorf("rejections counter = %v, want at least 2", got)
	}
}

func TestDirectoryVanishesAndReturns(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "conf")
	write(t, filepath.Join(dir, "a.yaml"), vsDoc("a", "a"))
	r := start(t, dir, Options{})
	_, n := r.last()

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	// Give the watcher time to see the removal and fail a reload.
	testwait.For(t, waitTimeout, func() error {
		if logs := r.logs.String(); !strings.Contains(logs, "config reload failed") {
			return fmt.Errorf("no failed reload logged:\n%s", logs)
		}
		return nil
	})
	if _, m := r.last(); m != n {
		t.Errorf("published %d more times while the directory was gone", m-n)
	}
	if got := keys(r.src.Objects()); got != "VirtualService shop/a" {
		t.Errorf("Objects() = [%s] while the directory is gone, want the last ones", got)
	}

	write(t, filepath.Join(dir, "b.yaml"), drDoc("b"))
	r.waitForKeys(t, "DestinationRule shop/b")
}

func TestRunErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "does-not-exist")
	src, err := New(missing, Options{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = src.Run(context.Background(), func([]*meshconfig.Object) { t.Error("published") })
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("Run on a missing directory = %v, want an error naming %s", err, missing)
	}
	if src.Loaded() {
		t.Error("Loaded() after a failed Run")
	}

	file := filepath.Join(t.TempDir(), "file.yaml")
	write(t, file, vsDoc("a", "a"))
	src, _ = New(file, Options{}, nil, nil)
	if err := src.Run(context.Background(), func([]*meshconfig.Object) {}); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("Run on a file = %v, want a not-a-directory error", err)
	}
	// A failed Run may be retried.
	if err := src.Run(context.Background(), func([]*meshconfig.Object) {}); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("Run again = %v, want the same error", err)
	}

	if _, err := New("", Options{}, nil, nil); err == nil {
		t.Error("New with no directory succeeded")
	}
	reg := prometheus.NewRegistry()
	if _, err := New(t.TempDir(), Options{}, nil, reg); err != nil {
		t.Fatal(err)
	}
	if _, err := New(t.TempDir(), Options{}, nil, reg); err == nil {
		t.Error("registering the metrics twice succeeded")
	}
}

func TestRunRefusesToRunConcurrently(t *testing.T) {
	dir := t.TempDir()
	r := start(t, dir, Options{})
	err := r.src.Run(context.Background(), func([]*meshconfig.Object) { t.Error("second Run published") })
	if err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("concurrent Run = %v, want an error", err)
	}
}

func TestPanickingPublishDoesNotStopRun(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), vsDoc("a", "a"))
	src, err := New(dir, Options{Debounce: 10 * time.Millisecond}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu    sync.Mutex
		calls int
		got   = make(chan string, 10)
	)
	done := make(chan error, 1)
	go func() {
		done <- src.Run(ctx, func(objs []*meshconfig.Object) {
			mu.Lock()
			calls++
			n := calls
			mu.Unlock()
			if n == 2 {
				panic("publisher bug")
			}
			select {
			case got <- keys(objs):
			default:
			}
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	if k := <-got; k != "VirtualService shop/a" {
		t.Fatalf("first publish [%s]", k)
	}
	write(t, filepath.Join(dir, "b.yaml"), drDoc("b"))
	// The second publish panics; the retry publishes again.
	deadline := time.After(waitTimeout)
	for {
		select {
		case k := <-got:
			if k == "DestinationRule shop/b, VirtualService shop/a" {
				return
			}
		case <-deadline:
			t.Fatal("no publish after the panic")
		}
	}
}

func TestRejectionJSON(t *testing.T) {
	b, err := json.Marshal(meshconfig.Rejection{File: "a.yaml", Index: 1, Kind: "Gateway", Namespace: "ns", Name: "gw", Field: "spec.servers", Reason: "r"})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var got []string
	for k := range m {
		got = append(got, k)
	}
	slices.Sort(got)
	if want := "field,file,index,kind,name,namespace,reason"; strings.Join(got, ",") != want {
		t.Errorf("JSON keys %v, want %s", got, want)
	}
}

func TestBrokenEditKeepsLastGood(t *testing.T) {
	dir := t.TempDir()
	routes, other := filepath.Join(dir, "routes.yaml"), filepath.Join(dir, "other.yaml")
	write(t, routes, vsDoc("a", "a-v1")+"---\n"+drDoc("d"))
	write(t, other, vsDoc("b", "b-v1"))
	r := start(t, dir, Options{Debounce: 10 * time.Millisecond})
	r.waitForKeys(t, "DestinationRule shop/d, VirtualService shop/a, VirtualService shop/b")

	// An invalid edit of a: the last good a stays, and the rejection says so.
	bad := strings.Replace(vsDoc("a", "a-v2"), "destination: {host: a-v2}", "destination: {host: a-v2}, weight: 50}, {destination: {host: x}, weight: 40", 1)
	write(t, routes, bad+"---\n"+drDoc("d"))
	r.waitFor(t, "the rejection of a", func([]*meshconfig.Object) bool { return len(r.src.Rejections()) == 1 })
	objs, _ := r.last()
	if got := keys(objs); got != "DestinationRule shop/d, VirtualService shop/a, VirtualService shop/b" {
		t.Fatalf("after an invalid edit: [%s]", got)
	}
	for _, o := range objs {
		if o.Name == "a" && hostOf(o) != "a-v1" {
			t.Fatalf("a routes to %s, want the last good a-v1", hostOf(o))
		}
	}
	if rj := r.src.Rejections()[0]; rj.Name != "a" || !strings.Contains(rj.Reason, "100") || !strings.HasSuffix(rj.Reason, keptNote) {
		t.Fatalf("rejection = %+v", rj)
	}

	// Broken YAML in the file: everything that came from it stays.
	write(t, routes, "kind: [unclosed\n")
	r.waitFor(t, "the broken file", func([]*meshconfig.Object) bool {
		rs := r.src.Rejections()
		return len(rs) == 1 && rs[0].File == "routes.yaml" && rs[0].Name == ""
	})
	if objs, _ := r.last(); keys(objs) != "DestinationRule shop/d, VirtualService shop/a, VirtualService shop/b" {
		t.Fatalf("after breaking the file: [%s]", keys(objs))
	}

	// A valid edit that drops d removes it; deleting a file removes its objects.
	write(t, routes, vsDoc("a", "a-v3"))
	r.waitForKeys(t, "VirtualService shop/a, VirtualService shop/b")
	if err := os.Remove(other); err != nil {
		t.Fatal(err)
	}
	r.waitForKeys(t, "VirtualService shop/a")
}
