// Package pushctx turns ingest changes into published, immutable push
// contexts, one per mesh: it debounces change notifications, merges the
// mesh's clusters into a mesh.Snapshot, runs the generators, and marshals
// every resource once so that every proxy stream shares the same bytes.
//
// Streams follow a mesh with Current: it returns the published State (nil
// until the mesh is ready) and a channel closed when a newer State
// replaces it. A stream that is busy simply sees the newest State when it
// looks again: pending pushes merge by construction, and a slow stream
// never holds back a publication.
package pushctx

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/navemesh/nave/shared/gen"
	"github.com/navemesh/nave/shared/mesh"
	"github.com/navemesh/nave/shared/proxy"
)

// Source gives a mesh's clusters; ingest.Server implements it.
type Source interface {
	Clusters(mesh string) []mesh.ClusterInput
}

// Options configure a Manager.
type Options struct {
	// DebounceQuiet is how long the mesh must be quiet before a rebuild.
	DebounceQuiet time.Duration
	// DebounceMax bounds how long a rebuild waits under continuous change.
	DebounceMax time.Duration
	Logger      *slog.Logger
	Registerer  prometheus.Registerer
}

// Prepared is a resource marshalled once, shared by every stream.
type Prepared struct {
	Name string
	Any  *anypb.Any
	// Hash identifies the content (hex SHA-256 prefix of the bytes).
	Hash string
}

// State is one published push context of a mesh. It is immutable.
type State struct {
	Mesh      string
	Version   uint64
	BuiltAt   time.Time
	Snapshot  *mesh.Snapshot
	Resources map[string]map[string]*Prepared // type URL -> name -> resource
	Problems  []mesh.Problem
	// superseded is closed when a newer State is published.
	superseded chan struct{}

	metrics *metrics
	// proxies memoizes Envoy generation per proxy key; interned shares one
	// Prepared per (type, name, content) across every key.
	proxyMu  sync.Mutex
	proxies  map[proxy.Key]*proxyEntry
	interned map[internKey]*Prepared
	problems map[mesh.Problem]bool
}

type internKey struct{ typeURL, name, hash string }

type proxyEntry struct {
	once sync.Once
	res  *ProxyResources
}

// ProxyResources is what one Envoy proxy key receives from a State.
type ProxyResources struct {
	Resources map[string]map[string]*Prepared // type URL -> name -> resource
	Problems  []mesh.Problem
}

// ForProxy returns the resources for Envoy proxies with key k, generating
// and marshalling them on first use; later callers with an equal key share
// the result, and resources with equal content share their bytes across
// keys (marshal once). Safe for concurrent use.
func (s *State) ForProxy(k proxy.Key) *ProxyResources {
	s.proxyMu.Lock()
	if s.proxies == nil {
		s.proxies = map[proxy.Key]*proxyEntry{}
	}
	e := s.proxies[k]
	if e == nil {
		e = &proxyEntry{}
		s.proxies[k] = e
	}
	s.proxyMu.Unlock()
	e.once.Do(func() {
		start := time.Now()
		out := gen.Envoy(s.Snapshot, k)
		res := &ProxyResources{Resources: make(map[string]map[string]*Prepared, len(out.Resources)), Problems: out.Problems}
		marshalled := marshal(out)
		s.proxyMu.Lock()
		if s.interned == nil {
			s.interned = map[internKey]*Prepared{}
			s.problems = make(map[mesh.Problem]bool, len(s.Problems))
			for _, p := range s.Problems {
				s.problems[p] = true
			}
		}
		for typeURL, list := range marshalled {
			byName := make(map[string]*Prepared, len(list))
			for _, p := range list {
				ik := internKey{typeURL, p.Name, p.Hash}
				if q, ok := s.interned[ik]; ok {
					p = q
				} else {
					s.interned[ik] = p
				}
				byName[p.Name] = p
			}
			res.Resources[typeURL] = byName
		}
		for _, p := range out.Problems {
			s.problems[p] = true
		}
		n := len(s.problems)
		s.proxyMu.Unlock()
		if s.metrics != nil {
			s.metrics.problems.WithLabelValues(s.Mesh).Set(float64(n))
		}
		if s.metrics != nil {
			s.metrics.proxyGenSeconds.Observe(time.Since(start).Seconds())
		}
		e.res = res
	})
	return e.res
}

// AllProblems returns the problems of the build and of every proxy
// generation so far, sorted.
func (s *State) AllProblems() []mesh.Problem {
	s.proxyMu.Lock()
	out := append([]mesh.Problem(nil), s.Problems...)
	for p := range s.problems {
		if !slices.Contains(s.Problems, p) {
			out = append(out, p)
		}
	}
	s.proxyMu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Resource != b.Resource {
			return a.Resource < b.Resource
		}
		if a.Field != b.Field {
			return a.Field < b.Field
		}
		return a.Reason < b.Reason
	})
	return out
}

// Superseded is closed when a newer State of the mesh is published.
func (s *State) Superseded() <-chan struct{} { return s.superseded }

// Manager builds and publishes States. Safe for concurrent use.
type Manager struct {
	src     Source
	opts    Options
	log     *slog.Logger
	metrics *metrics

	mu     sync.Mutex
	ctx    context.Context
	meshes map[string]*meshState
}

type meshState struct {
	name   string
	notify chan struct{} // capacity 1: a pending rebuild
	ready  chan struct{} // closed at the first publication

	mu         sync.Mutex
	current    *State
	everSynced bool
	// builder is used by the mesh's build loop only.
	builder mesh.Builder
}

// New returns a Manager reading clusters from src.
func New(src Source, opts Options) *Manager {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Manager{src: src, opts: opts, log: opts.Logger, metrics: newMetrics(opts.Registerer), meshes: map[string]*meshState{}}
}

// Start makes the Manager build in the background until ctx is done.
// Notifications received before Start are kept and served then.
func (m *Manager) Start(ctx context.Context) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ctx = ctx
	for _, ms := range m.meshes {
		go m.loop(ctx, ms)
	}
}

func (m *Manager) mesh(name string) *meshState {
	m.mu.Lock()
	defer m.mu.Unlock()
	ms := m.meshes[name]
	if ms == nil {
		ms = &meshState{name: name, notify: make(chan struct{}, 1), ready: make(chan struct{})}
		m.meshes[name] = ms
		if m.ctx != nil {
			go m.loop(m.ctx, ms)
		}
	}
	return ms
}

// Notify tells the Manager that mesh changed. It never blocks.
func (m *Manager) Notify(mesh string) {
	ms := m.mesh(mesh)
	select {
	case ms.notify <- struct{}{}:
	default: // a rebuild is already pending; it will see this change
	}
}

// Current returns the mesh's published State, or nil while the mesh is
// not ready (no cluster of it has synced yet since the hub started), and a
// channel that is closed when that answer changes.
func (m *Manager) Current(mesh string) (*State, <-chan struct{}) {
	ms := m.mesh(mesh)
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.current == nil {
		return nil, ms.ready
	}
	return ms.current, ms.current.superseded
}

// States returns the current State of every ready mesh.
func (m *Manager) States() []*State {
	m.mu.Lock()
	list := make([]*meshState, 0, len(m.meshes))
	for _, ms := range m.meshes {
		list = append(list, ms)
	}
	m.mu.Unlock()
	var out []*State
	for _, ms := range list {
		ms.mu.Lock()
		if ms.current != nil {
			out = append(out, ms.current)
		}
		ms.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Mesh < out[j].Mesh })
	return out
}

func (m *Manager) loop(ctx context.Context, ms *meshState) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-ms.notify:
		}
		if !m.debounce(ctx, ms) {
			return
		}
		m.safeBuild(ms)
	}
}

// safeBuild builds, turning a panic into a logged failure: the mesh keeps
// its previous State and the loop goes on.
func (m *Manager) safeBuild(ms *meshState) {
	defer func() {
		if r := recover(); r != nil {
			m.metrics.failures.Inc()
			m.log.Error("push context build failed; the previous one stays", "mesh", ms.name, "panic", r)
		}
	}()
	m.build(ms)
}

// debounce waits until the mesh has been quiet for DebounceQuiet, or
// DebounceMax has passed since the first change. It reports false if ctx
// ended.
func (m *Manager) debounce(ctx context.Context, ms *meshState) bool {
	deadline := time.NewTimer(m.opts.DebounceMax)
	defer deadline.Stop()
	quiet := time.NewTimer(m.opts.DebounceQuiet)
	defer quiet.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-ms.notify:
			quiet.Reset(m.opts.DebounceQuiet)
		case <-quiet.C:
			return true
		case <-deadline.C:
			return true
		}
	}
}

func (m *Manager) build(ms *meshState) {
	start := time.Now()
	clusters := m.src.Clusters(ms.name)
	ms.mu.Lock()
	if !ms.everSynced {
		for _, c := range clusters {
			ms.everSynced = ms.everSynced || c.Synced
		}
	}
	ready := ms.everSynced
	prev := ms.current
	ms.mu.Unlock()
	if !ready {
		m.log.Debug("mesh not ready; no cluster has synced", "mesh", ms.name)
		return
	}

	snap := ms.builder.Build(ms.name, clusters)
	out := gen.GRPC(snap)
	st := &State{
		Mesh:       ms.name,
		BuiltAt:    start,
		Snapshot:   snap,
		Resources:  prepare(out, prev),
		Problems:   append(append([]mesh.Problem(nil), snap.Problems...), out.Problems...),
		superseded: make(chan struct{}),
		metrics:    m.metrics,
	}

	ms.mu.Lock()
	if ms.current != nil {
		st.Version = ms.current.Version + 1
		close(ms.current.superseded)
	} else {
		st.Version = 1
		close(ms.ready)
	}
	ms.current = st
	ms.mu.Unlock()

	d := time.Since(start)
	m.metrics.builds.Inc()
	m.metrics.buildSeconds.Observe(d.Seconds())
	m.metrics.services.WithLabelValues(ms.name).Set(float64(len(snap.Services)))
	m.metrics.conflicts.WithLabelValues(ms.name).Set(float64(len(snap.Conflicts)))
	m.metrics.problems.WithLabelValues(ms.name).Set(float64(len(st.Problems)))
	m.log.Info("push context published", "mesh", ms.name, "version", st.Version, "services", len(snap.Services),
		"clusters", len(clusters), "problems", len(st.Problems), "conflicts", len(snap.Conflicts), "took", d)
}

// prepare marshals every generated resource once. A resource whose bytes
// equal the previous State's reuses that Prepared, so unchanged resources
// keep their identity across publications.
func prepare(out *gen.Output, prev *State) map[string]map[string]*Prepared {
	res := make(map[string]map[string]*Prepared, len(out.Resources))
	for typeURL, list := range marshal(out) {
		byName := make(map[string]*Prepared, len(list))
		for _, p := range list {
			if prev != nil {
				if q, ok := prev.Resources[typeURL][p.Name]; ok && q.Hash == p.Hash {
					p = q
				}
			}
			byName[p.Name] = p
		}
		res[typeURL] = byName
	}
	return res
}

// marshal serializes every resource deterministically and hashes it.
func marshal(out *gen.Output) map[string][]*Prepared {
	opts := proto.MarshalOptions{Deterministic: true}
	res := make(map[string][]*Prepared, len(out.Resources))
	for typeURL, list := range out.Resources {
		ps := make([]*Prepared, 0, len(list))
		for _, r := range list {
			b, err := opts.Marshal(r.Message)
			if err != nil {
				continue // generated messages always marshal
			}
			sum := sha256.Sum256(b)
			ps = append(ps, &Prepared{Name: r.Name, Any: &anypb.Any{TypeUrl: typeURL, Value: b}, Hash: hex.EncodeToString(sum[:8])})
		}
		res[typeURL] = ps
	}
	return res
}
