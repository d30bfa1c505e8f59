// Package fallback makes a spoke its cluster's local primary while the hub
// is gone (docs/design.md invariant 5: losing the hub never breaks a cluster).
// It composes the hub's own engine (xds/engine: xds/pushctx over a source
// of cluster stores, xds/cache, xds/ads) over the spoke's live local state plus the
// remote view the hub gave it on Watch (spoke/remote) and the mesh's
// MeshConfig and MeshNetworks from that view, so a proxy gets from the spoke what the hub
// would give it for the same inputs.
//
// While the hub serves, the Server's builds take in the local cluster
// alone and the remote view stays in its wire form (a spoke on standby
// holds no decoded copy of the rest of the mesh); from the hub's first
// loss on, during Options.After, the view is decoded and builds take it
// in. The Server answers proxies only while active: it becomes
// active after Options.After without a synced hub stream, and hands back
// once the hub has been synced (it ACKed the spoke's full state, outage
// changes included) for Options.HandBackAfter, closing its proxy streams
// gradually over Options.Drain so they return to the hub. Nothing is
// deleted on the way back: the spoke pushes its state to the hub as ever.
package fallback

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/spoke/remote"
	"github.com/navemesh/nave/xds/ads"
	"github.com/navemesh/nave/xds/cache"
	"github.com/navemesh/nave/xds/engine"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/pushctx"
)

// trustDomain is the mesh's trust domain from Trust, "" (the default) without.
func (o Options) trustDomain(string) string {
	if o.Trust == nil {
		return ""
	}
	td, _ := o.Trust()
	return td
}

// Options configure a Server.
type Options struct {
	Mesh, Cluster string
	// DomainSuffix is the cluster's DNS suffix (empty: cluster.local), as
	// the spoke tells the hub.
	DomainSuffix string
	// After is how long the hub must be gone (no synced stream) before the
	// spoke serves; HandBackAfter how long the hub must have been synced
	// again before it stops; Drain spreads the closing of its proxy
	// streams over that long.
	After, HandBackAfter, Drain time.Duration
	// HubSynced reports whether the spoke's hub stream is synced
	// (uplink.Uplink.Synced).
	HubSynced func() error
	// View is the rest of the mesh (nil: the local cluster alone).
	View *remote.View
	// Trust gives the mesh's trust domain for the snapshots it serves (the identities its
	// proxies' TLS and RBAC expect); nil: mesh.DefaultTrustDomain.
	Trust Trust
	// Push configures the push context as the hub's (debounce).
	DebounceQuiet, DebounceMax time.Duration
	// ADS configures the ADS server; Meshes, DefaultMesh and Registerer
	// are set from these Options.
	ADS    ads.Options
	Logger *slog.Logger
	// Registerer receives the spoke's nave_spoke_fallback_* metrics and the
	// engine's side-neutral ones (nave_pushctx_*, nave_proxy_*, nave_xds_*…),
	// as on the hub.
	Registerer prometheus.Registerer
	// Tick is how often the hub's health is looked at; zero means 100 ms.
	Tick time.Duration
}

// Server is the fallback xDS server. It is safe for concurrent use.
type Server struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer

	opts    Options
	log     *slog.Logger
	metrics *metrics
	// engine is built all the time; its ADS server answers only
	// streams admitted while active.
	engine *engine.Engine

	mu          sync.Mutex
	local       []*meshconfig.Object
	localSynced bool
	// remote is set from the hub's first loss on: builds take in the
	// remote view. Before, the push context (built once, for no proxy)
	// holds the local cluster alone and the view its wire form alone.
	// remoteBuilt is set once a push context with the remote view has
	// been published since the fallback began preparing (step): the spoke
	// serves no proxy before. unwatch ends the preparing; lost records a
	// loss of the hub not prepared for yet; building is whether the build
	// in progress took in the remote view.
	remote, remoteBuilt, lost, building bool
	unwatch                             func()
	active                              bool
	since                               time.Time
	transitions                         int
	// hubSince is when the hub's stream last became synced (zero while it
	// is not); lostSince when it last stopped being synced.
	hubSince, lostSince time.Time
	streams             map[*gated]struct{}
}

// New returns a Server; nothing serves before Run.
func New(opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Tick == 0 {
		opts.Tick = 100 * time.Millisecond
	}
	s := &Server{opts: opts, log: opts.Logger, streams: map[*gated]struct{}{}, since: time.Now(), lostSince: time.Now()}
	s.metrics = newMetrics(opts.Registerer, s)
	ao := opts.ADS
	ao.Hosted = func(mesh string) bool { return mesh == opts.Mesh }
	ao.HostedNames = func() []string { return []string{opts.Mesh} }
	ao.DefaultMesh = opts.Mesh
	s.engine = engine.New(s, engine.Options{
		Push: pushctx.Options{DebounceQuiet: opts.DebounceQuiet, DebounceMax: opts.DebounceMax,
			Ready: func(string, []mesh.ClusterInput) bool { return s.localReady() }, TrustDomain: opts.trustDomain,
			// The mesh's MeshConfig as the hub last gave it on Watch: the
			// fallback builds with the hub's mesh config (a change of it is
			// a change of the view, which Run notifies).
			MeshConfig: s.meshConfig,
			// Its MeshNetworks likewise (docs/multi-network.md).
			MeshNetworks: s.meshNetworks,
			OnPublish:    s.published},
		ADS:    ao,
		Logger: opts.Logger, Registerer: opts.Registerer,
	})
	return s
}

// published records that a push context with the remote view is
// published (the builds of a mesh run one at a time: Clusters then this).
func (s *Server) published(*pushctx.State) {
	s.mu.Lock()
	if s.building && s.unwatch != nil {
		s.remoteBuilt = true
	}
	s.mu.Unlock()
}

// meshConfig is the engine's MeshConfig: the remote view's, for the
// spoke's own mesh only; nil (Istio's defaults) without a view or before
// the hub gave one.
func (s *Server) meshConfig(meshName string) *meshv1alpha1.MeshConfig {
	if meshName != s.opts.Mesh || s.opts.View == nil {
		return nil
	}
	return s.opts.View.MeshConfig()
}

// meshNetworks is the engine's MeshNetworks: the remote view's, for the
// spoke's own mesh only; nil (none) without a view or before the hub gave
// one.
func (s *Server) meshNetworks(meshName string) *meshv1alpha1.MeshNetworks {
	if meshName != s.opts.Mesh || s.opts.View == nil {
		return nil
	}
	return s.opts.View.MeshNetworks()
}

// Update replaces the local cluster's state with objs (the source's
// complete state). It never blocks.
func (s *Server) Update(objs []*meshconfig.Object) {
	s.mu.Lock()
	s.local, s.localSynced = objs, true
	s.mu.Unlock()
	s.engine.Notify(s.opts.Mesh)
}

func (s *Server) localReady() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.localSynced
}

// Clusters implements pushctx.Source: the local cluster, live, and the
// remote clusters as the hub last gave them. Only the spoke's own mesh
// exists here.
func (s *Server) Clusters(meshName string) []mesh.ClusterInput {
	if meshName != s.opts.Mesh {
		return nil
	}
	s.mu.Lock()
	suffix := s.opts.DomainSuffix
	if suffix == "" {
		suffix = meshconfig.DefaultDomainSuffix
	}
	local := mesh.ClusterInput{Name: s.opts.Cluster, Connected: true, Synced: s.localSynced, DomainSuffix: suffix}
	if s.localSynced {
		local.Objects = sortedObjects(s.local)
	}
	remote := s.remote
	s.building = remote
	s.mu.Unlock()
	out := []mesh.ClusterInput{local}
	if s.opts.View != nil && remote {
		out = append(out, s.opts.View.Clusters()...)
	}
	return out
}

// sortedObjects orders objects as the hub's store does (kind, namespace,
// name), so that both build from the same input order.
func sortedObjects(objs []*meshconfig.Object) []*meshconfig.Object {
	out := slices.Clone(objs)
	slices.SortFunc(out, meshconfig.CompareObjects)
	return out
}

// View is the remote view the server serves from (nil if none).
func (s *Server) View() *remote.View { return s.opts.View }

// Publisher is the fallback's push context (for tests and debug views).
func (s *Server) Publisher() *pushctx.Publisher { return s.engine.Publisher() }

// Resources is the fallback's resource cache, as ads serves it.
func (s *Server) Resources() *cache.Cache { return s.engine.Cache() }

// Run builds push contexts and follows the hub's health until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	s.engine.Start(ctx)
	s.engine.Notify(s.opts.Mesh)
	var viewChanged <-chan struct{}
	if s.opts.View != nil {
		viewChanged = s.opts.View.Changed()
	}
	tick := time.NewTicker(s.opts.Tick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-viewChanged:
			viewChanged = s.opts.View.Changed()
			s.engine.Notify(s.opts.Mesh)
		case now := <-tick.C:
			s.step(now, s.opts.HubSynced() == nil)
		}
	}
}

// step moves the state machine: healthy says whether the hub stream is
// synced at now.
func (s *Server) step(now time.Time, healthy bool) {
	s.mu.Lock()
	switch {
	case healthy && s.hubSince.IsZero():
		s.hubSince = now
	case !healthy && !s.hubSince.IsZero():
		s.hubSince, s.lostSince = time.Time{}, now
		s.lost = true
	}
	// Preparing takes the remote view into the builds (see remote) and
	// follows the push context as a proxy would, so that it is built at
	// once and at every change: from the hub's loss on, or, for a spoke
	// that never had a synced hub (started during an outage), once it
	// would serve. It ends when the spoke hands back, or when the hub is
	// back before the spoke served.
	prepare := !healthy && s.unwatch == nil && s.localSynced && (s.lost || now.Sub(s.lostSince) >= s.opts.After)
	var unwatch func()
	if healthy && !s.active && s.unwatch != nil {
		unwatch, s.unwatch, s.remoteBuilt = s.unwatch, nil, false
	}
	var drain []*gated
	switch {
	case !s.active && !healthy && now.Sub(s.lostSince) >= s.opts.After && s.localSynced && s.remoteBuilt:
		s.active, s.since = true, now
		s.transitions++
		s.metrics.transitions.WithLabelValues("activate").Inc()
		s.log.Warn("hub gone: serving xDS for the cluster (fallback)", "without_hub", now.Sub(s.lostSince).Round(time.Millisecond))
	case s.active && healthy && now.Sub(s.hubSince) >= s.opts.HandBackAfter:
		s.active, s.since = false, now
		s.transitions++
		s.metrics.transitions.WithLabelValues("hand_back").Inc()
		for g := range s.streams {
			drain = append(drain, g)
		}
		s.log.Warn("hub back and synced: handing proxies back", "hub_synced_for", now.Sub(s.hubSince).Round(time.Millisecond),
			"proxies", len(drain), "drain", s.opts.Drain)
		unwatch, s.unwatch, s.remoteBuilt = s.unwatch, nil, false
	}
	if prepare {
		s.remote, s.lost = true, false
		s.unwatch = func() {} // replaced below, outside the lock
	}
	s.mu.Unlock()
	if unwatch != nil {
		unwatch()
	}
	if prepare {
		if s.opts.View != nil {
			s.opts.View.KeepDecoded()
		}
		w := s.engine.Publisher().Watch(s.opts.Mesh)
		s.mu.Lock()
		s.unwatch = w
		s.mu.Unlock()
		s.engine.Notify(s.opts.Mesh)
	}
	if len(drain) > 0 {
		go s.drain(drain)
	}
}

// drain closes streams one by one, spread over Options.Drain, so that
// proxies return to the hub gradually rather than all at once.
func (s *Server) drain(streams []*gated) {
	gap := s.opts.Drain / time.Duration(len(streams))
	for i, g := range streams {
		if i > 0 && gap > 0 {
			time.Sleep(gap)
		}
		s.mu.Lock()
		active := s.active
		s.mu.Unlock()
		if active {
			return // the hub went away again while draining
		}
		g.cancel(errHandedBack)
	}
}

var errHandedBack = fmt.Errorf("the hub is back: this spoke no longer serves xDS (fallback ended)")

// Active reports whether the spoke serves xDS now.
func (s *Server) Active() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active
}

// Status is what /debug/fallback shows.
type Status struct {
	Enabled     bool             `json:"enabled"`
	Active      bool             `json:"active"`
	Since       time.Time        `json:"since"`
	Transitions int              `json:"transitions"`
	HubSynced   bool             `json:"hubSynced"`
	HubSince    *time.Time       `json:"hubSyncedSince,omitempty"`
	LostSince   *time.Time       `json:"hubLostSince,omitempty"`
	After       string           `json:"after"`
	HandBack    string           `json:"handBackAfter"`
	Proxies     int              `json:"proxies"`
	Remote      remote.Status    `json:"remoteView"`
	Conns       []ads.ConnStatus `json:"connections"`
}

// Status reports the fallback's state.
func (s *Server) Status() Status {
	s.mu.Lock()
	st := Status{Enabled: true, Active: s.active, Since: s.since, Transitions: s.transitions, HubSynced: !s.hubSince.IsZero(),
		After: s.opts.After.String(), HandBack: s.opts.HandBackAfter.String(), Proxies: len(s.streams)}
	if !s.hubSince.IsZero() {
		t := s.hubSince
		st.HubSince = &t
	} else {
		t := s.lostSince
		st.LostSince = &t
	}
	s.mu.Unlock()
	if s.opts.View != nil {
		st.Remote = s.opts.View.Status()
	}
	st.Conns = s.engine.ADS().Status()
	return st
}

// gated is one proxy stream admitted while active: its context is
// cancelled to hand the proxy back.
type gated struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// admit registers a stream, or refuses it while the hub serves.
func (s *Server) admit(ctx context.Context) (*gated, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.active {
		s.metrics.refused.Inc()
		return nil, status.Error(codes.Unavailable, "the hub is serving this cluster; this spoke serves xDS only while the hub is gone (fallback)")
	}
	g := &gated{}
	g.ctx, g.cancel = context.WithCancelCause(ctx)
	s.streams[g] = struct{}{}
	return g, nil
}

func (s *Server) release(g *gated) {
	g.cancel(nil)
	s.mu.Lock()
	delete(s.streams, g)
	s.mu.Unlock()
}

// finish turns a stream ended by hand-back into UNAVAILABLE, which every
// xDS client retries (and a grpc-go client with the hub listed first sends
// to the hub).
func finish(g *gated, err error) error {
	if context.Cause(g.ctx) == errHandedBack {
		return status.Error(codes.Unavailable, errHandedBack.Error())
	}
	return err
}

// StreamAggregatedResources serves a state-of-the-world ADS stream while
// the spoke is in fallback.
func (s *Server) StreamAggregatedResources(stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	g, err := s.admit(stream.Context())
	if err != nil {
		return err
	}
	defer s.release(g)
	return finish(g, s.engine.ADS().StreamAggregatedResources(sotwStream{stream, g.ctx}))
}

// DeltaAggregatedResources serves a delta ADS stream while the spoke is in
// fallback.
func (s *Server) DeltaAggregatedResources(stream discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	g, err := s.admit(stream.Context())
	if err != nil {
		return err
	}
	defer s.release(g)
	return finish(g, s.engine.ADS().DeltaAggregatedResources(deltaStream{stream, g.ctx}))
}

type sotwStream struct {
	discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer
	ctx context.Context
}

func (s sotwStream) Context() context.Context { return s.ctx }

type deltaStream struct {
	discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer
	ctx context.Context
}

func (s deltaStream) Context() context.Context { return s.ctx }
