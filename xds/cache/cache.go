// Package cache is the xDS engine's per-key resource cache: for each
// State a publisher (pushctx) publishes, it generates on first use what
// each proxy key receives, marshals every resource once and shares the
// bytes across keys and States. An ADS server reads it through
// resource.Source, as go-control-plane's server reads its cache.
//
// Generation is a pure function of the State's snapshot and the proxy
// key (docs/design.md invariant 6): a key is first reduced to what it
// contributes (its cache key), and a State whose snapshot differs from an
// earlier one only in endpoints starts from the earlier output and
// regenerates only what those endpoints reach.
package cache

import (
	"fmt"
	"log/slog"
	"runtime"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/navemesh/nave/shared/fairshare"
	"github.com/navemesh/nave/xds/proxy"
	"github.com/navemesh/nave/xds/pushctx"
	"github.com/navemesh/nave/xds/resource"
)

// Publisher is what the cache follows: each mesh's published State.
// pushctx.Publisher implements it.
type Publisher interface {
	Current(mesh string) (*pushctx.State, <-chan struct{})
	Watch(mesh string) (unwatch func())
	States() []*pushctx.State
}

// Options configure a Cache.
type Options struct {
	// Verify makes every incremental generation (one that reuses an
	// earlier State's output) also generate from scratch and compare: a
	// difference means the reuse missed an input (docs/design.md invariant 6).
	// Differences are logged, counted and returned by Mismatches. For
	// tests; it doubles generation cost.
	Verify bool
	// MaxConcurrentGenerations bounds how many proxy keys (and proxyless
	// outputs) are generated at once across all meshes, so that a storm of
	// new connections or a change reaching every proxy takes the CPU in
	// turns instead of all generations' memory at once. The slots are
	// shared fairly among meshes (shared/fairshare): when all are taken,
	// a freed one goes to the next mesh with a generation waiting, round
	// robin, so a storm in one mesh queues behind its own work. Zero
	// means GOMAXPROCS.
	MaxConcurrentGenerations int
	Logger                   *slog.Logger
	Registerer               prometheus.Registerer
}

// Cache implements resource.Source over a Publisher. Safe for concurrent
// use.
type Cache struct {
	pub     Publisher
	opts    Options
	log     *slog.Logger
	metrics *metrics

	// gens holds MaxConcurrentGenerations slots, shared fairly by mesh.
	gens *fairshare.Semaphore

	mu         sync.Mutex
	meshes     map[string]*meshCache
	mismatches []string
}

// meshCache is one mesh's: the Entry of its newest State, and the newest
// result per cache key across its States.
type meshCache struct {
	mu      sync.Mutex
	cur     *Entry
	results resultCache
	// tables is the newest name table per name-table key (nametable.go).
	tables resultCache
}

// New returns a Cache following pub.
func New(pub Publisher, opts Options) *Cache {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxConcurrentGenerations <= 0 {
		opts.MaxConcurrentGenerations = runtime.GOMAXPROCS(0)
	}
	c := &Cache{pub: pub, opts: opts, log: opts.Logger, gens: fairshare.New(opts.MaxConcurrentGenerations), meshes: map[string]*meshCache{}}
	c.metrics = newMetrics(opts.Registerer, func() float64 { return float64(c.gens.Waiting()) })
	return c
}

// Current returns the Entry of the mesh's published State (nil while the
// mesh is not ready) and a channel closed when that answer changes.
func (c *Cache) Current(mesh string) (resource.State, <-chan struct{}) {
	st, changed := c.pub.Current(mesh)
	if st == nil {
		return nil, changed
	}
	return c.Entry(st), changed
}

// Watch registers a stream following mesh with the publisher.
func (c *Cache) Watch(mesh string) (unwatch func()) { return c.pub.Watch(mesh) }

// Entries returns the Entry of every ready mesh's current State, sorted
// by mesh.
func (c *Cache) Entries() []*Entry {
	var out []*Entry
	for _, st := range c.pub.States() {
		out = append(out, c.Entry(st))
	}
	return out
}

// Entry returns st's Entry, making it on first use. Called for every State
// in publication order (pushctx.Options.OnPublish), each Entry starts from
// its predecessor's output; a State asked for out of order gets an Entry
// of its own that starts from the newest results instead.
func (c *Cache) Entry(st *pushctx.State) *Entry {
	mc := c.mesh(st.Mesh)
	mc.mu.Lock()
	defer mc.mu.Unlock()
	cur := mc.cur
	switch {
	case cur != nil && cur.State == st:
		return cur
	case cur != nil && cur.State.Version > st.Version:
		cur.mu.Lock()
		prev := cur.prev
		cur.mu.Unlock()
		if prev != nil && prev.State == st {
			return prev
		}
		return &Entry{State: st, c: c, results: &mc.results, tableResults: &mc.tables}
	}
	e := &Entry{State: st, c: c, results: &mc.results, tableResults: &mc.tables}
	if cur != nil {
		if cur.State.Version+1 == st.Version {
			e.prev = cur
		}
		cur.mu.Lock()
		cur.prev = nil // Entries never chain: only the newest reuses its predecessor
		cur.mu.Unlock()
	}
	mc.cur = e
	mc.results.prune(st.Version, 16)
	mc.tables.prune(st.Version, 16)
	c.metrics.problems.WithLabelValues(st.Mesh).Set(float64(len(st.Problems)))
	return e
}

func (c *Cache) mesh(name string) *meshCache {
	c.mu.Lock()
	defer c.mu.Unlock()
	mc := c.meshes[name]
	if mc == nil {
		mc = &meshCache{}
		c.meshes[name] = mc
	}
	return mc
}

// Forget drops mesh's entries and results and its metric series. The
// publisher must have forgotten the mesh first (pushctx.Publisher.Forget),
// so that no State of it is published afterwards; an Entry a stream still
// holds stays valid for that stream, and a State of the mesh asked for
// later starts a new cache of it.
func (c *Cache) Forget(mesh string) {
	c.mu.Lock()
	delete(c.meshes, mesh)
	c.mu.Unlock()
	c.metrics.problems.DeleteLabelValues(mesh)
}

// acquire waits for a generation slot of mesh's turn; the returned
// function frees it.
func (c *Cache) acquire(mesh string) (release func()) {
	release, _ = c.gens.Acquire(mesh)
	return release
}

// Mismatches lists what Verify found: incremental generations that
// differed from generation from scratch. Empty unless Options.Verify.
func (c *Cache) Mismatches() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.mismatches...)
}

func (c *Cache) mismatch(st *pushctx.State, k proxy.Key, diffs []string) {
	c.log.Error("incremental generation differs from generation from scratch: a reuse rule misses an input",
		"mesh", st.Mesh, "version", st.Version, "key", fmt.Sprintf("%+v", k), "diff", diffs)
	c.metrics.mismatches.Inc()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range diffs {
		c.mismatches = append(c.mismatches, fmt.Sprintf("mesh %s v%d key %+v: %s", st.Mesh, st.Version, k, d))
	}
}
