package cache_test

import (
	"context"
	"testing"
	"time"

	"github.com/navemesh/nave/xds/cache"
	"github.com/navemesh/nave/xds/pushctx"
)

// start returns a started Publisher over src (1 ms quiet, 10 ms at most)
// and a Cache following it, given every State as it is published, as the
// hub wires them; both stop with the test.
func start(t *testing.T, src pushctx.Source, opts cache.Options) (*pushctx.Publisher, *cache.Cache) {
	t.Helper()
	var c *cache.Cache
	m := pushctx.New(src, pushctx.Options{DebounceQuiet: time.Millisecond, DebounceMax: 10 * time.Millisecond,
		OnPublish: func(st *pushctx.State) { c.Entry(st) }})
	c = cache.New(m, opts)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	m.Start(ctx)
	return m, c
}

// current returns the Entry of meshName's current State (nil if none).
func current(c *cache.Cache, m *pushctx.Publisher, meshName string) *cache.Entry {
	st, _ := m.Current(meshName)
	if st == nil {
		return nil
	}
	return c.Entry(st)
}
