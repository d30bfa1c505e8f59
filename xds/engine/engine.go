// Package engine is the xDS engine both the hub and the fallback spoke
// compose: a publisher of push contexts (xds/pushctx) over a source of
// cluster stores, the per-key resource cache (xds/cache) that follows it,
// and the ADS server (xds/ads) that serves the cache. New wires the three
// in the one order that works — each State reaches the cache as it is
// published (pushctx.Options.OnPublish → cache.Cache.Entry), so its entry
// starts from its predecessor's output — and a caller only says what
// changed (Notify, NotifyEndpoints), registers the ADS server on its
// listener and reads the debug views.
package engine

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/navemesh/nave/xds/ads"
	"github.com/navemesh/nave/xds/cache"
	"github.com/navemesh/nave/xds/pushctx"
)

// Options configure an Engine: each part's own options, and what they
// share.
type Options struct {
	// Push configures the publisher (debounce, readiness). Its OnPublish,
	// if set, is called after the cache has made the State's entry.
	Push  pushctx.Options
	Cache cache.Options
	ADS   ads.Options
	// Logger is what a part logs through when its options name no Logger:
	// Logger.With("part", "pushctx"|"cache"|"ads"). nil discards.
	Logger *slog.Logger
	// Registerer, if set, receives every part's metrics (nave_pushctx_*,
	// nave_cache_*, nave_xds_*…) in place of the parts' own Registerer.
	Registerer prometheus.Registerer
}

// Engine is one composed xDS engine. It is safe for concurrent use: its
// parts are set by New and never change, and each is safe for concurrent
// use.
type Engine struct {
	pub       *pushctx.Publisher
	cache     *cache.Cache
	ads       *ads.Server
	onPublish func(*pushctx.State)
}

// New builds the engine over src; nothing is built before Start.
func New(src pushctx.Source, opts Options) *Engine {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	po, co, ao := opts.Push, opts.Cache, opts.ADS
	if po.Logger == nil {
		po.Logger = opts.Logger.With("part", "pushctx")
	}
	if co.Logger == nil {
		co.Logger = opts.Logger.With("part", "cache")
	}
	if ao.Logger == nil {
		ao.Logger = opts.Logger.With("part", "ads")
	}
	if opts.Registerer != nil {
		po.Registerer, co.Registerer, ao.Registerer = opts.Registerer, opts.Registerer, opts.Registerer
	}
	e := &Engine{onPublish: po.OnPublish}
	// States are published on the meshes' build goroutines, which Start
	// starts: by then the cache below exists.
	po.OnPublish = e.published
	e.pub = pushctx.New(src, po)
	e.cache = cache.New(e.pub, co)
	e.ads = ads.New(e.cache, ao)
	return e
}

// published hands each State to the cache as it is published, in order per
// mesh, so that its entry starts from its predecessor's output.
func (e *Engine) published(st *pushctx.State) {
	e.cache.Entry(st)
	if e.onPublish != nil {
		e.onPublish(st)
	}
}

// Start makes the engine build push contexts until ctx ends.
// Notifications received before Start are kept and built then.
func (e *Engine) Start(ctx context.Context) { e.pub.Start(ctx) }

// Notify tells the engine that mesh's config changed (debounced): its
// clusters' objects, or its MeshConfig (Options.MeshConfig). It never
// blocks.
func (e *Engine) Notify(mesh string) { e.pub.Notify(mesh) }

// NotifyEndpoints tells the engine that only endpoints of mesh changed
// (built without the debounce). It never blocks.
func (e *Engine) NotifyEndpoints(mesh string) { e.pub.NotifyEndpoints(mesh) }

// Forget drops everything the engine keeps of mesh — its push context
// and build goroutine, its cache entries, its metric series — once the
// mesh is no longer served (deleted, or to be re-created as another
// incarnation). Close the mesh's proxy streams first (ADS().CloseMesh): a
// stream still serving it would ask for it again. A later Notify of the
// name builds it from scratch. It waits for a build of the mesh under way
// to finish; it must not be called from Options.Push.OnPublish.
func (e *Engine) Forget(mesh string) {
	e.pub.Forget(mesh)
	e.cache.Forget(mesh)
}

// ADS is the ADS server, to register on a gRPC server (or to wrap).
func (e *Engine) ADS() *ads.Server { return e.ads }

// Publisher is the push context publisher (for tests and debug views).
func (e *Engine) Publisher() *pushctx.Publisher { return e.pub }

// Cache is the resource cache the ADS server serves.
func (e *Engine) Cache() *cache.Cache { return e.cache }

// SyncStateCollector is the collector of nave_xds_proxy_sync_states
// (ads.Server.SyncStateCollector), for the caller to register.
func (e *Engine) SyncStateCollector() prometheus.Collector { return e.ads.SyncStateCollector() }
