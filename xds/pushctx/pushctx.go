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
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
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
	// Verify makes every incremental generation (one that reuses an
	// earlier State's output) also generate from scratch and compare: a
	// difference means the reuse missed an input (DESIGN.md invariant 6).
	// Differences are logged, counted and returned by Mismatches. For
	// tests; it doubles generation cost.
	Verify bool
	// Adaptive skips rebuilding a published mesh that no stream watches
	// (see Watch): the changes are kept and built when a stream watches
	// again. The first publication of a mesh always happens.
	Adaptive bool
	// MaxConcurrentGenerations bounds how many proxy keys (and proxyless
	// outputs) are generated at once across all meshes, so that a storm of
	// new connections or a change reaching every proxy takes the CPU in
	// turns instead of all generations' memory at once. Zero means
	// GOMAXPROCS.
	MaxConcurrentGenerations int
	Logger                   *slog.Logger
	Registerer               prometheus.Registerer
}

// Prepared is a resource marshalled once, shared by every stream.
type Prepared struct {
	Name string
	Any  *anypb.Any
	// Hash identifies the content (hex SHA-256 prefix of the bytes).
	Hash string
}

// State is one published push context of a mesh. It is immutable; what
// it generates for proxies is generated on first use and memoized.
type State struct {
	Mesh     string
	Version  uint64
	BuiltAt  time.Time
	Snapshot *mesh.Snapshot
	// Diff is how Snapshot differs from the previous State's.
	Diff mesh.Diff
	// ChangedAt is when the first change this State includes was
	// reported (the start of proxies' convergence); zero for the first.
	ChangedAt time.Time
	// Problems are the build's (the merge's) problems; generation adds its
	// own, see AllProblems.
	Problems []mesh.Problem
	// superseded is closed when a newer State is published.
	superseded chan struct{}

	metrics *metrics
	mgr     *Manager
	results *resultCache // the mesh's, shared by its States
	// cacheKeys memoizes cacheKey (proxy.Key -> proxy.Key); marshalled
	// maps each generated message to its Prepared (see marshal).
	cacheKeys  sync.Map
	marshalled sync.Map

	// proxies memoizes Envoy generation per proxy key; interned shares one
	// Prepared per (type, name, content) across every key. prev is the
	// State this one was built after, whose output generation may reuse
	// (per Diff); it is dropped when a newer State is published, so States
	// never chain.
	proxyMu  sync.Mutex
	prev     *State
	proxies  map[proxy.Key]*proxyEntry
	interned map[internKey]*Prepared
	problems map[mesh.Problem]bool

	grpcOnce sync.Once
	grpc     *ProxyResources
	// servers memoizes, per cache key, Proxyless plus the server
	// listeners of the workload (ProxylessFor).
	servers map[proxy.Key]*proxyEntry
}

type internKey struct{ typeURL, name, hash string }

type proxyEntry struct {
	once   sync.Once
	origin proxy.Key // the key generated for; others of its cacheKey share the result
	res    *ProxyResources
}

// ProxyResources is what one Envoy proxy key receives from a State.
type ProxyResources struct {
	Resources map[string]map[string]*Prepared // type URL -> name -> resource
	Problems  []mesh.Problem

	// id identifies the result (0 for one made outside this package). A
	// result derived from an earlier one (only endpoints changed) keeps
	// how it differs from its base and from up to historyDepth results
	// before it: steps, newest first (never the results themselves).
	id    uint64
	steps []step

	// from memoizes ChangesFrom by (since, type).
	fromMu sync.Mutex
	from   map[fromKey]*Changes

	setMu sync.Mutex
	sets  map[string]*Set
}

// Changes is how one type of a result differs from the result it was
// derived from: resources added or changed (sorted by name), and names
// removed (sorted). Read-only.
type Changes struct {
	Updated []*Prepared
	Removed []string
}

// Empty reports whether nothing changed.
func (c *Changes) Empty() bool { return len(c.Updated) == 0 && len(c.Removed) == 0 }

var (
	resultIDs atomic.Uint64
	noChanges = &Changes{}
)

func newResults() uint64 { return resultIDs.Add(1) }

// ID identifies the result among every result of this process (0: none).
func (r *ProxyResources) ID() uint64 { return r.id }

// historyDepth bounds how many derivations back ChangesSince can answer.
const historyDepth = 8

// step is how a result differs from the result with id base, by type.
type step struct {
	base    uint64
	changes map[string]*Changes
}

// ChangesSince reports how typeURL's resources differ from those of the
// result with id since, when that is known: since is this result, or one
// of the (up to historyDepth) results it was derived from, step by step.
// A stream holding exactly since's resources can then send just the
// changes instead of comparing every resource.
func (r *ProxyResources) ChangesSince(since uint64, typeURL string) (*Changes, bool) {
	if since == 0 {
		return nil, false
	}
	if since == r.id {
		return noChanges, true
	}
	n := slices.IndexFunc(r.steps, func(st step) bool { return st.base == since })
	switch {
	case n < 0:
		return nil, false
	case n == 0:
		if c := r.steps[0].changes[typeURL]; c != nil {
			return c, true
		}
		return noChanges, true
	}
	// Several steps: every name any of them touched is updated to what this
	// result holds, or removed if it holds none.
	all := r.Resources[typeURL]
	touched := map[string]bool{}
	for _, st := range r.steps[:n+1] {
		if c := st.changes[typeURL]; c != nil {
			for _, p := range c.Updated {
				touched[p.Name] = true
			}
			for _, name := range c.Removed {
				touched[name] = true
			}
		}
	}
	if len(touched) == 0 {
		return noChanges, true
	}
	out := &Changes{}
	for name := range touched {
		if p := all[name]; p != nil {
			out.Updated = append(out.Updated, p)
		} else {
			out.Removed = append(out.Removed, name)
		}
	}
	slices.SortFunc(out.Updated, compareNames)
	slices.Sort(out.Removed)
	return out, true
}

type fromKey struct {
	since   uint64
	typeURL string
}

// ChangesFrom is ChangesSince for any earlier result since whose whole set
// of typeURL the caller holds as held (name → content hash; a Set's
// Hashes, read-only): when the results are unrelated (a config change), the
// difference is computed once per (since, type) and shared by every stream
// that holds the same set, instead of each comparing everything.
func (r *ProxyResources) ChangesFrom(since uint64, typeURL string, held map[string]string) *Changes {
	if ch, ok := r.ChangesSince(since, typeURL); ok {
		return ch
	}
	k := fromKey{since, typeURL}
	r.fromMu.Lock()
	defer r.fromMu.Unlock()
	if ch := r.from[k]; ch != nil {
		return ch
	}
	all := r.Resources[typeURL]
	ch := &Changes{}
	for name, p := range all {
		if held[name] != p.Hash {
			ch.Updated = append(ch.Updated, p)
		}
	}
	for name := range held {
		if all[name] == nil {
			ch.Removed = append(ch.Removed, name)
		}
	}
	slices.SortFunc(ch.Updated, compareNames)
	slices.Sort(ch.Removed)
	if r.from == nil || len(r.from) >= 16 {
		r.from = map[fromKey]*Changes{}
	}
	r.from[k] = ch
	return ch
}

// Set is every resource of one type, sorted by name, with its version: what
// a wildcard subscriber receives. Computed once per type and shared by all
// streams of the result; read-only.
type Set struct {
	Sorted  []*Prepared
	Hashes  map[string]string // name -> content hash
	Version string
	sum     versionSum
}

// Set returns the complete set of typeURL.
func (r *ProxyResources) Set(typeURL string) *Set {
	r.setMu.Lock()
	defer r.setMu.Unlock()
	if s := r.sets[typeURL]; s != nil {
		return s
	}
	all := r.Resources[typeURL]
	s := &Set{Sorted: make([]*Prepared, 0, len(all)), Hashes: make(map[string]string, len(all))}
	for _, p := range all {
		s.Sorted = append(s.Sorted, p)
		s.Hashes[p.Name] = p.Hash
		s.sum.toggle(p.Name, p.Hash)
	}
	slices.SortFunc(s.Sorted, compareNames)
	s.Version = s.sum.String()
	r.setSet(typeURL, s)
	return s
}

func (r *ProxyResources) setSet(typeURL string, s *Set) {
	if r.sets == nil {
		r.sets = map[string]*Set{}
	}
	r.sets[typeURL] = s
}

func compareNames(a, b *Prepared) int { return strings.Compare(a.Name, b.Name) }

func compareName(p *Prepared, name string) int { return strings.Compare(p.Name, name) }

// apply returns the set that ch makes of s, in time proportional to the
// set's size for the copies but to the change for sorting and hashing.
func (s *Set) apply(ch *Changes) *Set {
	out := &Set{Sorted: slices.Clone(s.Sorted), Hashes: maps.Clone(s.Hashes), sum: s.sum}
	for _, name := range ch.Removed {
		if old, ok := out.Hashes[name]; ok {
			out.sum.toggle(name, old)
			delete(out.Hashes, name)
			if i, found := slices.BinarySearchFunc(out.Sorted, name, compareName); found {
				out.Sorted = slices.Delete(out.Sorted, i, i+1)
			}
		}
	}
	for _, p := range ch.Updated {
		if old, ok := out.Hashes[p.Name]; ok {
			out.sum.toggle(p.Name, old)
		}
		out.Hashes[p.Name] = p.Hash
		out.sum.toggle(p.Name, p.Hash)
		if i, found := slices.BinarySearchFunc(out.Sorted, p.Name, compareName); found {
			out.Sorted[i] = p
		} else {
			out.Sorted = slices.Insert(out.Sorted, i, p)
		}
	}
	out.Version = out.sum.String()
	return out
}

// SetVersion is the version of a set of resources: a hash of their names
// and content hashes, so equal sets have equal versions. It is the XOR of
// a 128-bit hash of each (name, content hash) pair, so a set that differs
// from another by a few resources gets its version from the other's in
// time proportional to the difference (Set.apply).
func SetVersion(hashes map[string]string) string {
	var v versionSum
	for n, h := range hashes {
		v.toggle(n, h)
	}
	return v.String()
}

// versionSum accumulates SetVersion; toggle adds or removes an entry.
type versionSum [2]uint64

func (v *versionSum) toggle(name, hash string) {
	var buf [256]byte
	b := append(append(append(buf[:0], name...), 0), hash...)
	sum := sha256.Sum256(b)
	v[0] ^= binary.BigEndian.Uint64(sum[0:8])
	v[1] ^= binary.BigEndian.Uint64(sum[8:16])
}

func (v versionSum) String() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], v[0])
	binary.BigEndian.PutUint64(b[8:], v[1])
	return hex.EncodeToString(b[:])
}

// Generation modes (metric label and log field).
const (
	genFull      = "full"      // from scratch
	genEndpoints = "endpoints" // only the endpoints of changed services, the rest reused
	genReused    = "reused"    // nothing changed: the previous State's output
)

// ForProxy returns the resources for Envoy proxies with key k, generating
// and marshalling them on first use; later callers with an equal key share
// the result, and resources with equal content share their bytes across
// keys (marshal once). When only endpoints changed since the previous
// State and that State generated for k, only the changed services'
// endpoints are generated again (and the clusters and listeners of a proxy
// whose own address is among the changed endpoints). Safe for concurrent
// use.
func (s *State) ForProxy(k proxy.Key) *ProxyResources {
	ck := s.cacheKey(k)
	s.proxyMu.Lock()
	if s.proxies == nil {
		s.proxies = map[proxy.Key]*proxyEntry{}
	}
	e := s.proxies[ck]
	if e == nil {
		e = &proxyEntry{origin: k}
		s.proxies[ck] = e
	}
	s.proxyMu.Unlock()
	verify := s.mgr != nil && s.mgr.opts.Verify
	e.once.Do(func() {
		defer s.acquire()()
		start := time.Now()
		res, mode := s.generate(ck, k)
		if mode != genFull && verify {
			s.verify(k, res)
		}
		e.res = res
		if s.metrics != nil {
			s.metrics.generations.WithLabelValues(mode).Inc()
			s.metrics.proxyGenSeconds.Observe(time.Since(start).Seconds())
		}
	})
	if verify && e.origin != k {
		s.verify(k, e.res) // shared with a key of other IPs: must be equal
	}
	return e.res
}

// cacheKey is the key generation for k is memoized under: k with its IPs
// and labels replaced by what they contribute (gen.InboundSignature,
// gen.LabelSignature), so the sidecars of one deployment, and proxies whose
// labels and IPs select nothing different, share one generation.
func (s *State) cacheKey(k proxy.Key) proxy.Key {
	if ck, ok := s.cacheKeys.Load(k); ok {
		return ck.(proxy.Key)
	}
	ck := s.computeCacheKey(k)
	s.cacheKeys.Store(k, ck)
	return ck
}

func (s *State) computeCacheKey(k proxy.Key) proxy.Key {
	ck := k
	ck.IPs, ck.Labels = "", ""
	if k.IPs != "" {
		if sig := gen.InboundSignature(s.Snapshot, k); sig != "" {
			ck.IPs = "inbound:" + sig
		}
	}
	if sig := gen.LabelSignature(s.Snapshot, k); sig != "" {
		ck.Labels = "selects:" + sig
	}
	return ck
}

// resultCache holds, per cache key, the newest result generated for the
// mesh in any State, so that generation can start from it even when the
// State just before skipped that key (States published faster than
// proxies asked). Entries of keys nobody asked for lately are dropped.
type resultCache struct {
	mu    sync.Mutex
	byKey map[proxy.Key]cachedResult
}

type cachedResult struct {
	version uint64
	snap    *mesh.Snapshot
	res     *ProxyResources
}

func (c *resultCache) get(k proxy.Key) (cachedResult, bool) {
	if c == nil {
		return cachedResult{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.byKey[k]
	return r, ok
}

func (c *resultCache) put(k proxy.Key, r cachedResult) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byKey == nil {
		c.byKey = map[proxy.Key]cachedResult{}
	}
	if old, ok := c.byKey[k]; !ok || old.version < r.version {
		c.byKey[k] = r
	}
}

// prune drops entries older than version minus keep.
func (c *resultCache) prune(version, keep uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, r := range c.byKey {
		if r.version+keep < version {
			delete(c.byKey, k)
		}
	}
}

// base returns the result generation for ck may start from, and how this
// State's snapshot differs from the one it was generated from.
func (s *State) base(ck proxy.Key) (*ProxyResources, mesh.Diff) {
	r, ok := s.results.get(ck)
	if !ok || r.res == nil {
		return nil, mesh.Diff{}
	}
	if r.snap == s.Snapshot {
		return r.res, mesh.Diff{}
	}
	s.proxyMu.Lock()
	prev := s.prev
	s.proxyMu.Unlock()
	if prev != nil && r.snap == prev.Snapshot {
		return r.res, s.Diff
	}
	return r.res, mesh.DiffSnapshots(r.snap, s.Snapshot)
}

// generate builds what the State gives key k, whose cache key is ck.
func (s *State) generate(ck, k proxy.Key) (*ProxyResources, string) {
	res, mode := s.generateFrom(ck, k)
	s.results.put(ck, cachedResult{version: s.Version, snap: s.Snapshot, res: res})
	return res, mode
}

func (s *State) generateFrom(ck, k proxy.Key) (*ProxyResources, string) {
	pr, diff := s.base(ck)
	switch {
	case pr != nil && diff.Unchanged():
		return pr, genReused
	case pr == nil || diff.Config:
		out := gen.Envoy(s.Snapshot, k)
		res := &ProxyResources{Resources: make(map[string]map[string]*Prepared, len(out.Resources)), Problems: out.Problems, id: newResults()}
		for typeURL, list := range s.intern(s.marshal(out)) {
			byName := make(map[string]*Prepared, len(list))
			for _, p := range list {
				byName[p.Name] = p
			}
			res.Resources[typeURL] = byName
		}
		s.addProblems(out.Problems)
		return res, genFull
	}
	// Only endpoints changed. Clusters, listeners and routes read
	// endpoints only for DNS clusters (inline assignments) and for the
	// proxy's own inbound ports (its IPs); endpoints are regenerated just
	// for the changed services.
	v := gen.NewView(s.Snapshot, k)
	own := false
	for _, ip := range k.IPList() {
		own = own || diff.Addresses[ip]
	}
	dns := false
	for h := range diff.Hosts {
		if svc := s.Snapshot.Services[h]; svc != nil && svc.Resolution != mesh.ResolutionStatic {
			dns = true
		}
	}
	out := &gen.Output{Resources: map[string][]gen.Resource{typeurl.Endpoint: v.EndpointsOf(diff.Hosts)}}
	if own || dns {
		out.Resources[typeurl.Cluster] = v.Clusters()
	}
	if own {
		out.Resources[typeurl.Listener] = v.Listeners()
		out.Resources[typeurl.Route] = v.Routes()
	}
	out.Problems = v.Problems()
	res := s.derive(pr, out)
	s.addProblems(out.Problems)
	return res, genEndpoints
}

// derive returns base with out's resources in place of base's: endpoints
// by name (base's others kept), every other type out holds wholesale. It
// records what changed per type (ChangesSince) and derives the sorted sets
// base had already computed.
func (s *State) derive(base *ProxyResources, out *gen.Output) *ProxyResources {
	changes := map[string]*Changes{}
	res := &ProxyResources{Resources: make(map[string]map[string]*Prepared, len(base.Resources)), Problems: base.Problems, id: newResults()}
	if base.id != 0 {
		res.steps = append(make([]step, 0, historyDepth), step{base: base.id, changes: changes})
		res.steps = append(res.steps, base.steps[:min(len(base.steps), historyDepth-1)]...)
	}
	for typeURL, byName := range base.Resources {
		res.Resources[typeURL] = byName // immutable: shared
	}
	for typeURL, list := range s.intern(s.marshal(out)) {
		var byName map[string]*Prepared
		if typeURL == typeurl.Endpoint {
			byName = maps.Clone(base.Resources[typeURL])
			if byName == nil {
				byName = map[string]*Prepared{}
			}
		} else {
			byName = make(map[string]*Prepared, len(list))
		}
		ch := &Changes{}
		for _, p := range list {
			if q := base.Resources[typeURL][p.Name]; q != nil && q.Hash == p.Hash {
				p = q // unchanged content keeps its identity
			} else {
				ch.Updated = append(ch.Updated, p)
			}
			byName[p.Name] = p
		}
		if typeURL != typeurl.Endpoint {
			for name := range base.Resources[typeURL] {
				if byName[name] == nil {
					ch.Removed = append(ch.Removed, name)
				}
			}
		}
		slices.SortFunc(ch.Updated, compareNames)
		slices.Sort(ch.Removed)
		changes[typeURL] = ch
		res.Resources[typeURL] = byName
	}
	for _, p := range out.Problems {
		if !slices.Contains(res.Problems, p) {
			res.Problems = append(res.Problems, p)
		}
	}
	base.setMu.Lock()
	for typeURL, set := range base.sets {
		if ch := changes[typeURL]; ch == nil || ch.Empty() {
			res.setSet(typeURL, set) // unchanged: shared
		} else if 4*(len(ch.Updated)+len(ch.Removed)) < len(set.Sorted) {
			res.setSet(typeURL, set.apply(ch))
		}
	}
	base.setMu.Unlock()
	return res
}

// intern replaces each Prepared by the State's equal one, if any.
func (s *State) intern(marshalled map[string][]*Prepared) map[string][]*Prepared {
	s.proxyMu.Lock()
	defer s.proxyMu.Unlock()
	if s.interned == nil {
		s.interned = map[internKey]*Prepared{}
	}
	for typeURL, list := range marshalled {
		for i, p := range list {
			ik := internKey{typeURL, p.Name, p.Hash}
			if q, ok := s.interned[ik]; ok {
				list[i] = q
			} else {
				s.interned[ik] = p
			}
		}
	}
	return marshalled
}

// addProblems records problems found generating, for AllProblems.
func (s *State) addProblems(ps []mesh.Problem) {
	s.proxyMu.Lock()
	if s.problems == nil {
		s.problems = make(map[mesh.Problem]bool, len(s.Problems)+len(ps))
		for _, p := range s.Problems {
			s.problems[p] = true
		}
	}
	for _, p := range ps {
		s.problems[p] = true
	}
	n := len(s.problems)
	s.proxyMu.Unlock()
	if s.metrics != nil {
		s.metrics.problems.WithLabelValues(s.Mesh).Set(float64(n))
	}
}

// verify generates k from scratch and compares with res.
func (s *State) verify(k proxy.Key, res *ProxyResources) {
	s.verifyOutput(k, res, gen.Envoy(s.Snapshot, k))
}

// verifyOutput compares res with out, generated from scratch for k.
func (s *State) verifyOutput(k proxy.Key, res *ProxyResources, out *gen.Output) {
	var diffs []string
	for typeURL, list := range marshal(out) {
		got := res.Resources[typeURL]
		if len(got) != len(list) {
			diffs = append(diffs, fmt.Sprintf("%s: %d resources reused/regenerated, %d from scratch", typeURL, len(got), len(list)))
		}
		for _, p := range list {
			if q := got[p.Name]; q == nil || q.Hash != p.Hash {
				diffs = append(diffs, fmt.Sprintf("%s %s differs from a generation from scratch", typeURL, p.Name))
			}
		}
	}
	if len(diffs) > 0 {
		s.mgr.mismatch(s, k, diffs)
	}
}

// Proxyless returns the mesh-wide resources that proxyless gRPC clients
// receive, generating and marshalling them on first use (a mesh without
// proxyless clients never pays for them). Unchanged config reuses the
// previous State's; resources with equal bytes keep their identity.
func (s *State) Proxyless() *ProxyResources {
	s.grpcOnce.Do(func() {
		defer s.acquire()()
		// The mesh's newest proxyless result is the base, as for Envoy keys.
		key := proxy.Key{Type: proxy.GRPC, Mesh: s.Mesh}
		pg, diff := s.base(key)
		var res *ProxyResources
		mode := genFull
		switch {
		case pg != nil && diff.Unchanged():
			res, mode = pg, genReused
		case pg != nil && !diff.Config:
			// Only endpoints changed: only those hosts' assignments.
			res, mode = s.derive(pg, &gen.Output{Resources: map[string][]gen.Resource{typeurl.Endpoint: gen.GRPCEndpoints(s.Snapshot, diff.Hosts)}}), genEndpoints
			if s.mgr != nil && s.mgr.opts.Verify {
				s.verifyOutput(key, res, gen.GRPC(s.Snapshot))
			}
		default:
			out := gen.GRPC(s.Snapshot)
			s.addProblems(out.Problems)
			var prevRes map[string]map[string]*Prepared
			if pg != nil {
				prevRes = pg.Resources
			}
			res = &ProxyResources{Resources: prepare(out, prevRes), Problems: out.Problems, id: newResults()}
		}
		if s.metrics != nil {
			s.metrics.generations.WithLabelValues(mode).Inc()
		}
		s.results.put(key, cachedResult{version: s.Version, snap: s.Snapshot, res: res})
		s.setProxyless(res)
	})
	return s.grpc
}

// ProxylessFor returns what the proxyless client with key k receives: the
// mesh-wide Proxyless resources and, when k's IPs serve some ports, the
// server listeners an xDS gRPC server on those ports asks for
// (gen.GRPCServerListeners: its PeerAuthentication and
// AuthorizationPolicies). The addition is generated once per cache key
// (labels and inbound ports, as for Envoy) and shares every other
// resource with Proxyless. Safe for concurrent use.
func (s *State) ProxylessFor(k proxy.Key) *ProxyResources {
	base := s.Proxyless()
	ck := s.cacheKey(k) // memoized; its IPs say whether k's IPs serve ports
	if ck.IPs == "" {
		return base
	}
	s.proxyMu.Lock()
	if s.servers == nil {
		s.servers = map[proxy.Key]*proxyEntry{}
	}
	e := s.servers[ck]
	if e == nil {
		e = &proxyEntry{origin: k}
		s.servers[ck] = e
	}
	s.proxyMu.Unlock()
	e.once.Do(func() {
		listeners, problems := gen.GRPCServerListeners(s.Snapshot, k)
		if len(listeners) == 0 {
			e.res = base
			return
		}
		s.addProblems(problems)
		res := &ProxyResources{Resources: make(map[string]map[string]*Prepared, len(base.Resources)), Problems: base.Problems}
		for typeURL, byName := range base.Resources {
			res.Resources[typeURL] = byName // immutable: shared
		}
		all := maps.Clone(base.Resources[typeurl.Listener])
		if all == nil {
			all = map[string]*Prepared{}
		}
		for typeURL, list := range s.intern(marshal(&gen.Output{Resources: map[string][]gen.Resource{typeurl.Listener: listeners}})) {
			for _, p := range list {
				all[p.Name] = p
			}
			res.Resources[typeURL] = all
		}
		for _, p := range problems {
			if !slices.Contains(res.Problems, p) {
				res.Problems = append(res.Problems, p)
			}
		}
		e.res = res
	})
	if s.mgr != nil && s.mgr.opts.Verify && e.origin != k {
		// Shared with a key of other IPs or labels: must be equal.
		listeners, _ := gen.GRPCServerListeners(s.Snapshot, k)
		var diffs []string
		if got, want := len(e.res.Resources[typeurl.Listener]), len(base.Resources[typeurl.Listener])+len(listeners); got != want {
			diffs = append(diffs, fmt.Sprintf("%s: %d listeners shared, %d from scratch", typeurl.Listener, got, want))
		}
		for _, p := range marshal(&gen.Output{Resources: map[string][]gen.Resource{typeurl.Listener: listeners}})[typeurl.Listener] {
			if q := e.res.Resources[typeurl.Listener][p.Name]; q == nil || q.Hash != p.Hash {
				diffs = append(diffs, fmt.Sprintf("%s %s differs from a generation from scratch", typeurl.Listener, p.Name))
			}
		}
		if len(diffs) > 0 {
			s.mgr.mismatch(s, k, diffs)
		}
	}
	return e.res
}

func (s *State) setProxyless(r *ProxyResources) {
	s.proxyMu.Lock()
	s.grpc = r
	s.proxyMu.Unlock()
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

	// gens holds a token per generation running (MaxConcurrentGenerations).
	gens chan struct{}

	mu         sync.Mutex
	ctx        context.Context
	meshes     map[string]*meshState
	mismatches []string
}

// acquire waits for a generation slot; the returned function frees it. A
// State without a Manager (tests) is unbounded.
func (s *State) acquire() (release func()) {
	if s.mgr == nil {
		return func() {}
	}
	select {
	case s.mgr.gens <- struct{}{}:
	default:
		s.mgr.metrics.genWaiting.Inc()
		s.mgr.gens <- struct{}{}
		s.mgr.metrics.genWaiting.Dec()
	}
	return func() { <-s.mgr.gens }
}

// Mismatches lists what Verify found: incremental generations that
// differed from generation from scratch. Empty unless Options.Verify.
func (m *Manager) Mismatches() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.mismatches...)
}

func (m *Manager) mismatch(s *State, k proxy.Key, diffs []string) {
	m.log.Error("incremental generation differs from generation from scratch: a reuse rule misses an input",
		"mesh", s.Mesh, "version", s.Version, "key", fmt.Sprintf("%+v", k), "diff", diffs)
	m.metrics.mismatches.Inc()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, d := range diffs {
		m.mismatches = append(m.mismatches, fmt.Sprintf("mesh %s v%d key %+v: %s", s.Mesh, s.Version, k, d))
	}
}

type meshState struct {
	name   string
	notify chan struct{} // capacity 1: a pending rebuild
	// endpoints is notify for endpoint-only changes: they skip the
	// debounce (capacity 1).
	endpoints chan struct{}
	ready     chan struct{} // closed at the first publication

	mu         sync.Mutex
	current    *State
	everSynced bool
	// firstChange is when the oldest change not yet built was reported.
	firstChange time.Time
	// watchers counts streams following the mesh (Watch); dirty is set
	// when an adaptive Manager skipped a build for lack of them.
	watchers int
	dirty    bool
	// builder is used by the mesh's build loop only.
	builder mesh.Builder
	results resultCache
}

// New returns a Manager reading clusters from src.
func New(src Source, opts Options) *Manager {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxConcurrentGenerations <= 0 {
		opts.MaxConcurrentGenerations = runtime.GOMAXPROCS(0)
	}
	return &Manager{src: src, opts: opts, log: opts.Logger, metrics: newMetrics(opts.Registerer),
		gens: make(chan struct{}, opts.MaxConcurrentGenerations), meshes: map[string]*meshState{}}
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
		ms = &meshState{name: name, notify: make(chan struct{}, 1), endpoints: make(chan struct{}, 1), ready: make(chan struct{})}
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
	ms.changed()
	select {
	case ms.notify <- struct{}{}:
	default: // a rebuild is already pending; it will see this change
	}
}

// NotifyEndpoints tells the Manager that only endpoints of mesh changed:
// the rebuild starts without waiting for the debounce (a config change
// already being debounced takes it along). It never blocks.
func (m *Manager) NotifyEndpoints(mesh string) {
	ms := m.mesh(mesh)
	ms.changed()
	select {
	case ms.endpoints <- struct{}{}:
	default:
	}
}

// changed records when a change not yet built was first reported.
func (ms *meshState) changed() {
	ms.mu.Lock()
	if ms.firstChange.IsZero() {
		ms.firstChange = time.Now()
	}
	ms.mu.Unlock()
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
			if !m.debounce(ctx, ms) {
				return
			}
		case <-ms.endpoints:
			m.metrics.fastBuilds.Inc()
		}
		if m.opts.Adaptive {
			ms.mu.Lock()
			idle := ms.watchers == 0 && ms.current != nil
			ms.dirty = ms.dirty || idle
			ms.mu.Unlock()
			if idle {
				m.metrics.skipped.Inc()
				m.log.Debug("no stream watches the mesh; build deferred", "mesh", ms.name)
				continue
			}
		}
		m.safeBuild(ms)
	}
}

// Watch registers a stream following mesh until the returned function is
// called. With Options.Adaptive, a mesh whose changes were not built for
// lack of watchers is built at once when one arrives.
func (m *Manager) Watch(mesh string) (unwatch func()) {
	ms := m.mesh(mesh)
	ms.mu.Lock()
	ms.watchers++
	dirty := ms.dirty
	ms.dirty = false
	ms.mu.Unlock()
	if dirty {
		select {
		case ms.endpoints <- struct{}{}: // skips the debounce: the changes are old
		default:
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			ms.mu.Lock()
			ms.watchers--
			ms.mu.Unlock()
		})
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
		case <-ms.endpoints:
			// Taken along by this build; it does not extend the wait.
		case <-quiet.C:
			return true
		case <-deadline.C:
			return true
		}
	}
}

func (m *Manager) build(ms *meshState) {
	start := time.Now()
	ms.mu.Lock()
	changedAt := ms.firstChange
	ms.firstChange = time.Time{} // changes reported from now on are for the next build
	ms.mu.Unlock()
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
	var prevSnap *mesh.Snapshot
	if prev != nil {
		prevSnap = prev.Snapshot
	}
	st := &State{
		Mesh:       ms.name,
		BuiltAt:    start,
		Snapshot:   snap,
		Diff:       mesh.DiffSnapshots(prevSnap, snap),
		ChangedAt:  changedAt,
		Problems:   append([]mesh.Problem(nil), snap.Problems...),
		superseded: make(chan struct{}),
		metrics:    m.metrics,
		mgr:        m,
		prev:       prev,
		results:    &ms.results,
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
	if prev != nil {
		prev.proxyMu.Lock()
		prev.prev = nil // States never chain: only the newest reuses its predecessor
		prev.proxyMu.Unlock()
	}
	ms.results.prune(st.Version, 16)

	d := time.Since(start)
	m.metrics.builds.Inc()
	m.metrics.buildSeconds.Observe(d.Seconds())
	m.metrics.services.WithLabelValues(ms.name).Set(float64(len(snap.Services)))
	m.metrics.conflicts.WithLabelValues(ms.name).Set(float64(len(snap.Conflicts)))
	m.metrics.problems.WithLabelValues(ms.name).Set(float64(len(st.Problems)))
	m.log.Info("push context published", "mesh", ms.name, "version", st.Version, "services", len(snap.Services),
		"clusters", len(clusters), "problems", len(st.Problems), "conflicts", len(snap.Conflicts),
		"config_changed", st.Diff.Config, "endpoint_changes", len(st.Diff.Hosts), "took", d)
}

// prepare marshals every generated resource once. A resource whose bytes
// equal prev's reuses that Prepared, so unchanged resources keep their
// identity across publications.
func prepare(out *gen.Output, prev map[string]map[string]*Prepared) map[string]map[string]*Prepared {
	res := make(map[string]map[string]*Prepared, len(out.Resources))
	for typeURL, list := range marshal(out) {
		byName := make(map[string]*Prepared, len(list))
		for _, p := range list {
			if q, ok := prev[typeURL][p.Name]; ok && q.Hash == p.Hash {
				p = q
			}
			byName[p.Name] = p
		}
		res[typeURL] = byName
	}
	return res
}

// marshal is the package's marshal, except that an endpoint assignment the
// generators shared between keys (memoized per snapshot) is marshalled
// once per State. Only assignments are remembered: no other message is
// shared, and remembering them would keep them alive.
func (s *State) marshal(out *gen.Output) map[string][]*Prepared {
	res := make(map[string][]*Prepared, len(out.Resources))
	for typeURL, list := range out.Resources {
		if typeURL != typeurl.Endpoint {
			res[typeURL] = marshal(&gen.Output{Resources: map[string][]gen.Resource{typeURL: list}})[typeURL]
			continue
		}
		ps := make([]*Prepared, 0, len(list))
		for _, r := range list {
			if p, ok := s.marshalled.Load(r.Message); ok && p.(*Prepared).Name == r.Name {
				ps = append(ps, p.(*Prepared))
			} else if p := prepareOne(typeURL, r); p != nil {
				s.marshalled.Store(r.Message, p)
				ps = append(ps, p)
			}
		}
		res[typeURL] = ps
	}
	return res
}

// marshal serializes every resource deterministically and hashes it.
func marshal(out *gen.Output) map[string][]*Prepared {
	res := make(map[string][]*Prepared, len(out.Resources))
	for typeURL, list := range out.Resources {
		ps := make([]*Prepared, 0, len(list))
		for _, r := range list {
			if p := prepareOne(typeURL, r); p != nil {
				ps = append(ps, p)
			}
		}
		res[typeURL] = ps
	}
	return res
}

// prepareOne marshals one resource (nil if it does not marshal, which a
// generated message always does).
func prepareOne(typeURL string, r gen.Resource) *Prepared {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r.Message)
	if err != nil {
		return nil
	}
	sum := sha256.Sum256(b)
	return &Prepared{Name: r.Name, Any: &anypb.Any{TypeUrl: typeURL, Value: b}, Hash: hex.EncodeToString(sum[:8])}
}
