package engine_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/xds/engine"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/pushctx"
)

type source struct{}

func (source) Clusters(m string) []mesh.ClusterInput {
	return []mesh.ClusterInput{{Name: "c1", Connected: true, Synced: true}}
}

// TestPublishedStatesReachTheCache: a State is in the cache, and the
// caller's own OnPublish has seen it, by the time the publisher announces
// it; the debug views read it.
func TestPublishedStatesReachTheCache(t *testing.T) {
	published := make(chan *pushctx.State, 4)
	eng := engine.New(source{}, engine.Options{Push: pushctx.Options{
		DebounceQuiet: time.Millisecond, DebounceMax: 10 * time.Millisecond,
		OnPublish: func(st *pushctx.State) { published <- st },
	}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	eng.Notify("m")
	eng.Start(ctx)

	var st *pushctx.State
	select {
	case st = <-published:
	case <-time.After(testwait.Timeout):
		t.Fatal("no State published")
	}
	cur, _ := eng.Publisher().Current("m")
	if cur != st {
		t.Fatalf("published %v, current %v", st, cur)
	}
	entries := eng.Cache().Entries()
	if len(entries) != 1 || entries[0].State != st {
		t.Fatalf("cache entries %v, want the published State's", entries)
	}
	all := func(string) bool { return true }
	if ms := eng.Meshes(all); len(ms) != 1 || ms[0].Mesh != "m" || ms[0].Version != st.Version || len(ms[0].Clusters) != 1 {
		t.Errorf("Meshes = %+v", ms)
	}
	if ms := eng.Meshes(func(string) bool { return false }); len(ms) != 0 {
		t.Errorf("Meshes of nothing visible = %+v", ms)
	}
	if _, err := eng.Services("other", all); err == nil {
		t.Error("Services of a mesh without a push context: no error")
	}
}

// TestForgetDropsTheMesh: a forgotten mesh's build goroutine ends, its
// State, cache entry and per-mesh metric series are gone, a read of it
// starts no goroutine, and a later Notify of the name builds it from
// scratch.
func TestForgetDropsTheMesh(t *testing.T) {
	published := make(chan *pushctx.State, 4)
	reg := prometheus.NewRegistry()
	eng := engine.New(source{}, engine.Options{Registerer: reg, Push: pushctx.Options{
		DebounceQuiet: time.Millisecond, DebounceMax: 10 * time.Millisecond,
		OnPublish: func(st *pushctx.State) { published <- st },
	}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	eng.Start(ctx)
	next := func() *pushctx.State {
		t.Helper()
		select {
		case st := <-published:
			return st
		case <-time.After(testwait.Timeout):
			t.Fatal("no State published")
			return nil
		}
	}

	eng.Notify("m")
	if st := next(); st.Version != 1 {
		t.Fatalf("first State is v%d", st.Version)
	}
	eng.Notify("m")
	if st := next(); st.Version != 2 {
		t.Fatalf("second State is v%d", st.Version)
	}
	testwait.Until(t, "one build goroutine, the mesh's", func() bool { return buildLoops() == 1 })
	if !hasSeries(t, reg, "m") {
		t.Fatal("no metric series of mesh m before Forget")
	}

	eng.Forget("m")
	testwait.Until(t, "the forgotten mesh's build goroutine ends", func() bool { return buildLoops() == 0 })
	// A late reader (a stream ending) starts no build goroutine.
	if st, _ := eng.Publisher().Current("m"); st != nil {
		t.Fatalf("Current after Forget = v%d", st.Version)
	}
	if n := buildLoops(); n != 0 {
		t.Fatalf("%d build goroutines after a read of the forgotten mesh", n)
	}
	if sts := eng.Publisher().States(); len(sts) != 0 {
		t.Errorf("States after Forget = %v", sts)
	}
	if es := eng.Cache().Entries(); len(es) != 0 {
		t.Errorf("cache entries after Forget = %v", es)
	}
	if hasSeries(t, reg, "m") {
		t.Error("metric series of mesh m after Forget")
	}

	eng.Notify("m")
	st := next()
	if st.Version != 1 || !st.Diff.Config {
		t.Fatalf("re-created mesh's first State is v%d (diff %+v), want v1 built from scratch", st.Version, st.Diff)
	}
	if es := eng.Cache().Entries(); len(es) != 1 || es[0].State != st {
		t.Errorf("cache after re-creation = %v, want the entry of the new v1", es)
	}
}

// buildLoops counts the goroutines running a Publisher's build loop
// (this test's: tests of this package do not run in parallel).
func buildLoops() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			// run.func1 is the loop's goroutine, from its creation on.
			return strings.Count(string(buf[:n]), "pushctx.(*Publisher).run.func1(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// hasSeries reports whether reg holds a series labelled mesh.
func hasSeries(t *testing.T, reg *prometheus.Registry, mesh string) bool {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "mesh" && l.GetValue() == mesh {
					return true
				}
			}
		}
	}
	return false
}
