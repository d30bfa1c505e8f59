package cache_test

import (
	"context"
	"testing"
	"time"

	"github.com/navemesh/nave/xds/cache"
	"github.com/navemesh/nave/xds/engine"
	"github.com/navemesh/nave/xds/pushctx"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
)

// start returns a started Publisher over src (1 ms quiet, 10 ms at most)
// and a Cache following it, given every State as it is published, as the
// hub wires them; both stop with the test.
func start(t *testing.T, src pushctx.Source, opts cache.Options) (*pushctx.Publisher, *cache.Cache) {
	t.Helper()
	eng := engine.New(src, engine.Options{
		Push:  pushctx.Options{DebounceQuiet: time.Millisecond, DebounceMax: 10 * time.Millisecond},
		Cache: opts,
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	eng.Start(ctx)
	return eng.Publisher(), eng.Cache()
}

// current returns the Entry of meshName's current State (nil if none).
func current(c *cache.Cache, m *pushctx.Publisher, meshName string) *cache.Entry {
	st, _ := m.Current(meshName)
	if st == nil {
		return nil
	}
	return c.Entry(st)
}

// publisher returns a func that publishes w's objects as mesh m's one
// cluster c1, waits for the new push context and returns its Entry.
func publisher(t *testing.T, src *pushctxtest.Source, m *pushctx.Publisher, c *cache.Cache, w *world) func() *cache.Entry {
	return func() *cache.Entry {
		t.Helper()
		_, changed := m.Current("m")
		src.Set("m", pushctxtest.Cluster("c1", true, w.list()))
		m.Notify("m")
		pushctxtest.Await(t, changed, "a new push context")
		return current(c, m, "m")
	}
}
