package cache

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"
	"weak"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen"
	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
	"github.com/navemesh/nave/xds/pushctx"
	"github.com/navemesh/nave/xds/resource"
)

// Entry is the cache's memo for one published State: what it generates
// for each proxy key, on first use. It implements resource.State. Safe for
// concurrent use.
type Entry struct {
	State *pushctx.State

	c       *Cache
	results *resultCache // the mesh's, shared by its Entries
	// tableResults is the mesh's newest name table per name-table key;
	// tables memoizes NameTableFor per name-table key (nameTableKeys:
	// proxy.Key -> proxy.Key).
	tableResults  *resultCache
	tables        map[proxy.Key]*proxyEntry
	nameTableKeys sync.Map
	// cacheKeys memoizes cacheKey (proxy.Key -> proxy.Key); marshalled
	// maps each shared endpoint assignment, weakly, to its Prepared (see
	// marshal).
	cacheKeys  sync.Map
	marshalled sync.Map
	// located memoizes locate (proxy.Key -> proxy.Key).
	located sync.Map

	// proxies memoizes Envoy generation per proxy key; interned shares one
	// Prepared per (type, name, content) across every key. prev is the
	// Entry of the State just before this one, whose output generation may
	// reuse (per State.Diff); it is dropped when a newer State gets its
	// Entry, so Entries never chain.
	mu       sync.Mutex
	prev     *Entry
	proxies  map[proxy.Key]*proxyEntry
	interned map[internKey]*resource.Prepared
	problems map[mesh.Problem]bool

	grpcOnce sync.Once
	grpc     *resource.ProxyResources
	// clients memoizes ProxylessClient per client key (clientKey, itself
	// memoized in clientKeys); servers, per cache key and client key, the
	// client resources plus the server listeners of the workload
	// (ProxylessFor).
	clients    map[proxy.Key]*proxyEntry
	clientKeys sync.Map
	servers    map[serverKey]*proxyEntry
}

type internKey struct{ typeURL, name, hash string }

type proxyEntry struct {
	once   sync.Once
	origin proxy.Key // the key generated for; others of its cacheKey share the result
	res    *resource.ProxyResources
}

// memoEntry returns m's entry for key, made on first use for origin (the
// key generated for). Called without e.mu held; it takes it.
func memoEntry[K comparable](e *Entry, m *map[K]*proxyEntry, key K, origin proxy.Key) *proxyEntry {
	e.mu.Lock()
	defer e.mu.Unlock()
	if *m == nil {
		*m = map[K]*proxyEntry{}
	}
	pe := (*m)[key]
	if pe == nil {
		pe = &proxyEntry{origin: origin}
		(*m)[key] = pe
	}
	return pe
}

// Version is the State's version.
func (e *Entry) Version() uint64 { return e.State.Version }

// ChangedAt is when the first change the State includes was reported.
func (e *Entry) ChangedAt() time.Time { return e.State.ChangedAt }

// ConfigChanged reports whether config, not only endpoints, changed.
func (e *Entry) ConfigChanged() bool { return e.State.Diff.Config || e.State.Diff.Telemetry }

// Generation modes (metric label and log field).
const (
	genFull      = "full"      // from scratch
	genEndpoints = "endpoints" // only the endpoints of changed services, the rest reused
	genRules     = "rules"     // only what changed DestinationRules, VirtualServices (and endpoints) reach, the rest reused
	genReused    = "reused"    // nothing changed: the previous State's output
)

// ForProxy returns the resources for Envoy proxies with key k, generating
// and marshalling them on first use; later callers with an equal key share
// the result, and resources with equal content share their bytes across
// keys (marshal once). When only endpoints changed since the previous
// State and that State generated for k, only the changed services'
// endpoints are generated again (and the clusters and listeners of a proxy
// whose own address is among the changed endpoints); when DestinationRules
// or VirtualServices changed too, only what they reach
// (gen.EnvoyRoutingChanged). Safe for concurrent use.
func (e *Entry) ForProxy(k proxy.Key) *resource.ProxyResources {
	k = e.locate(k)
	ck := e.cacheKey(k)
	pe := memoEntry(e, &e.proxies, ck, k)
	verify := e.c.opts.Verify
	pe.once.Do(func() {
		defer e.c.acquire(e.State.Mesh)()
		start := time.Now()
		res, mode := e.generate(ck, k)
		if mode != genFull && verify {
			e.verify(k, res)
		}
		pe.res = res
		e.c.metrics.generations.WithLabelValues(mode).Inc()
		e.c.metrics.proxyGenSeconds.Observe(time.Since(start).Seconds())
	})
	if verify && pe.origin != k {
		e.verify(k, pe.res) // shared with a key of other IPs: must be equal
	}
	return pe.res
}

// locate returns k with the locality it balances from in this State
// (scope.LocalityOf: the registry's locality of the workload at k's
// addresses before what its node says, as Istio decides).
func (e *Entry) locate(k proxy.Key) proxy.Key {
	if lk, ok := e.located.Load(k); ok {
		return lk.(proxy.Key)
	}
	lk := k
	if prev := e.keysFrom(k); prev != nil {
		if plk, ok := prev.located.Load(k); ok {
			lk = plk.(proxy.Key)
			if e.c.opts.Verify {
				e.verifyKey(k, "locality", lk.Locality, scope.LocalityOf(e.State.Snapshot, k))
			}
			e.located.Store(k, lk)
			return lk
		}
	}
	lk.Locality = scope.LocalityOf(e.State.Snapshot, k)
	e.located.Store(k, lk)
	return lk
}

// keysFrom is the previous State's Entry when what it decided about k's
// keys (locate, cacheKey) holds in this State too, nil otherwise. Those
// read the snapshot's config and the endpoints at k's own addresses (its
// locality, its inbound ports) only: a State whose difference is
// endpoints alone, none of them at k's addresses, decides the same. Under
// endpoint churn every State would otherwise work them out again for
// every connected proxy.
func (e *Entry) keysFrom(k proxy.Key) *Entry {
	d := e.State.Diff
	if d.Config || d.Telemetry {
		return nil
	}
	for _, ip := range k.IPList() {
		if d.Addresses[ip] {
			return nil
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.prev
}

// verifyKey records a mismatch when a key decision taken from the
// previous State differs from the one worked out afresh (Options.Verify).
func (e *Entry) verifyKey(k proxy.Key, what string, carried, fresh any) {
	if carried != fresh {
		e.c.mismatch(e.State, k, []string{fmt.Sprintf("%s %+v taken from the previous State, %+v worked out afresh", what, carried, fresh)})
	}
}

// cacheKey is the key generation for k is memoized under: k with its IPs
// and labels replaced by what they contribute (scope.InboundSignature,
// scope.LabelSignature), so the sidecars of one deployment, and proxies whose
// labels and IPs select nothing different, share one generation.
func (e *Entry) cacheKey(k proxy.Key) proxy.Key {
	if ck, ok := e.cacheKeys.Load(k); ok {
		return ck.(proxy.Key)
	}
	if prev := e.keysFrom(k); prev != nil {
		if pck, ok := prev.cacheKeys.Load(k); ok {
			ck := pck.(proxy.Key)
			if e.c.opts.Verify {
				e.verifyKey(k, "cache key", ck, e.computeCacheKey(k))
			}
			e.cacheKeys.Store(k, ck)
			return ck
		}
	}
	ck := e.computeCacheKey(k)
	e.cacheKeys.Store(k, ck)
	return ck
}

func (e *Entry) computeCacheKey(k proxy.Key) proxy.Key {
	ck := k
	ck.IPs, ck.Labels = "", ""
	if !gen.GRPCClientReads(e.State.Snapshot).Locality {
		// No rule of the mesh reads a proxy's locality (its traffic
		// policies are the same for Envoy and proxyless): sidecars of one
		// deployment in several zones share one generation.
		ck.Locality = mesh.Locality{}
	}
	if !gen.EnvoyReadsVersion(e.State.Snapshot) {
		// No EnvoyFilter matches proxy versions.
		ck.Version = ""
	}
	if !e.State.Snapshot.HasClusterLocal() {
		// No host is cluster-local: a proxy's cluster changes nothing.
		ck.Cluster = ""
	}
	ck.DNSCapture = k.DNSCapture && e.State.Snapshot.HasAutoAddresses()
	if k.IPs != "" {
		if sig := scope.InboundSignature(e.State.Snapshot, k); sig != "" {
			ck.IPs = "inbound:" + sig
		}
	}
	if sig := scope.LabelSignature(e.State.Snapshot, k); sig != "" {
		ck.Labels = "selects:" + sig
	}
	if ck.DNSCapture {
		// Auto-allocated addresses are given by the proxy's IP families.
		ck.IPs += families(k)
	}
	return ck
}

// baseFrom returns the result generation for ck may start from, how this
// State's snapshot differs from the one it was generated from, and that
// snapshot.
func (e *Entry) baseFrom(ck proxy.Key) (*resource.ProxyResources, mesh.Diff, *mesh.Snapshot) {
	r, ok := e.results.get(ck)
	if !ok || r.res == nil {
		return nil, mesh.Diff{}, nil
	}
	if r.snap == e.State.Snapshot {
		return r.res, mesh.Diff{}, r.snap
	}
	e.mu.Lock()
	prev := e.prev
	e.mu.Unlock()
	if prev != nil && r.snap == prev.State.Snapshot {
		return r.res, e.State.Diff, r.snap
	}
	return r.res, mesh.DiffSnapshots(r.snap, e.State.Snapshot), r.snap
}

// telemetryBase is the previous State's result for k when this State
// differs from it in Telemetry objects (and endpoints) only: a Telemetry
// with a new selector changes every key's label signature, yet what k
// received besides listeners is what it receives now.
func (e *Entry) telemetryBase(k proxy.Key) (*resource.ProxyResources, mesh.Diff, *mesh.Snapshot) {
	e.mu.Lock()
	prev := e.prev
	e.mu.Unlock()
	if prev == nil || (e.State.Diff.Config && e.State.Diff.Rules == nil && e.State.Diff.Routes == nil) || !e.State.Diff.Telemetry {
		return nil, mesh.Diff{}, nil
	}
	r, ok := e.results.get(prev.cacheKey(k))
	if !ok || r.res == nil || r.snap != prev.State.Snapshot {
		return nil, mesh.Diff{}, nil
	}
	return r.res, e.State.Diff, r.snap
}

// generate builds what the State gives key k, whose cache key is ck.
func (e *Entry) generate(ck, k proxy.Key) (*resource.ProxyResources, string) {
	res, mode := e.generateFrom(ck, k)
	e.results.put(ck, cachedResult{version: e.State.Version, snap: e.State.Snapshot, res: res})
	return res, mode
}

func (e *Entry) generateFrom(ck, k proxy.Key) (*resource.ProxyResources, string) {
	pr, diff, from := e.baseFrom(ck)
	if pr == nil {
		pr, diff, from = e.telemetryBase(k)
	}
	switch {
	case pr != nil && diff.Unchanged():
		return pr, genReused
	case pr == nil || (diff.Config && !e.routingOnly(diff, from)):
		return e.generateFull(k), genFull
	}
	// Only endpoints, Telemetry objects, DestinationRules, VirtualServices,
	// or some of them changed. Clusters, listeners and routes read endpoints only for DNS
	// clusters (inline assignments) and for the proxy's own inbound ports
	// (its IPs); endpoints are regenerated just for the changed services.
	// Telemetry shapes listeners only. DestinationRules shape their hosts'
	// clusters and assignments (and some listeners and routes),
	// VirtualServices routes (and some listeners): gen.EnvoyRoutingChanged
	// says which.
	own := false
	for _, ip := range k.IPList() {
		own = own || diff.Addresses[ip]
	}
	dns := false
	for h := range diff.Hosts {
		if svc := e.State.Snapshot.Services[h]; svc != nil && svc.Resolution != mesh.ResolutionStatic {
			dns = true
		}
	}
	var types []string
	if own || dns {
		types = append(types, typeurl.Cluster)
	}
	switch {
	case own:
		types = append(types, typeurl.Listener, typeurl.Route)
	case diff.Telemetry:
		types = append(types, typeurl.Listener)
	}
	if diff.Config {
		out := gen.EnvoyRoutingChanged(from, e.State.Snapshot, k, diff, types...)
		if out == nil {
			return e.generateFull(k), genFull
		}
		res := resource.DeriveRemoving(pr, e.intern(e.marshal(out.Output)), out.Whole, out.Gone, out.Problems)
		e.addProblems(out.Problems)
		return res, genRules
	}
	out := gen.EnvoyEndpointsChanged(e.State.Snapshot, k, diff.Hosts, types...)
	res := resource.Derive(pr, e.intern(e.marshal(out)), out.Problems)
	e.addProblems(out.Problems)
	e.c.metrics.patchFailures.Add(float64(out.PatchFailures))
	return res, genEndpoints
}

// routingOnly reports whether a result generated from snapshot from may
// be brought to this State's by regenerating what changed DestinationRules
// and VirtualServices reach (diff.Rules, diff.Routes): no other config
// changed, and the rules did not change whether a proxy's locality is
// read (its cache key would mean something else).
func (e *Entry) routingOnly(diff mesh.Diff, from *mesh.Snapshot) bool {
	return (diff.Rules != nil || diff.Routes != nil) && from != nil &&
		gen.GRPCClientReads(from).Locality == gen.GRPCClientReads(e.State.Snapshot).Locality
}

// generateFull generates and marshals everything of key k from scratch.
func (e *Entry) generateFull(k proxy.Key) *resource.ProxyResources {
	out := gen.Envoy(e.State.Snapshot, k)
	byType := make(map[string]map[string]*resource.Prepared, len(out.Resources))
	for typeURL, list := range e.intern(e.marshal(out)) {
		byName := make(map[string]*resource.Prepared, len(list))
		for _, p := range list {
			byName[p.Name] = p
		}
		byType[typeURL] = byName
	}
	e.addProblems(out.Problems)
	e.c.metrics.patchFailures.Add(float64(out.PatchFailures))
	return resource.New(byType, out.Problems)
}

// intern replaces each Prepared by the State's equal one, if any.
func (e *Entry) intern(marshalled map[string][]*resource.Prepared) map[string][]*resource.Prepared {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.interned == nil {
		e.interned = map[internKey]*resource.Prepared{}
	}
	for typeURL, list := range marshalled {
		for i, p := range list {
			ik := internKey{typeURL, p.Name, p.Hash}
			if q, ok := e.interned[ik]; ok {
				list[i] = q
			} else {
				e.interned[ik] = p
			}
		}
	}
	return marshalled
}

// addProblems records problems found generating, for AllProblems.
func (e *Entry) addProblems(ps []mesh.Problem) {
	e.mu.Lock()
	if e.problems == nil {
		e.problems = make(map[mesh.Problem]bool, len(e.State.Problems)+len(ps))
		for _, p := range e.State.Problems {
			e.problems[p] = true
		}
	}
	for _, p := range ps {
		e.problems[p] = true
	}
	n := len(e.problems)
	e.mu.Unlock()
	e.c.metrics.problems.WithLabelValues(e.State.Mesh).Set(float64(n))
}

// verify generates k from scratch and compares with res.
func (e *Entry) verify(k proxy.Key, res *resource.ProxyResources) {
	e.verifyOutput(k, res, gen.Envoy(e.State.Snapshot, k))
}

// verifyOutput compares res with out, generated from scratch for k.
func (e *Entry) verifyOutput(k proxy.Key, res *resource.ProxyResources, out *gen.Output) {
	var diffs []string
	for typeURL, list := range resource.Marshal(out.Resources) {
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
		e.c.mismatch(e.State, k, diffs)
	}
}

// marshal is resource.Marshal, except that an endpoint assignment the
// generators shared between keys (memoized per snapshot, mesh.MemoWeak)
// is marshalled once per Entry while it lives. Only assignments are
// remembered, and weakly: no other message is shared, and remembering
// them would keep them alive.
func (e *Entry) marshal(out *gen.Output) map[string][]*resource.Prepared {
	res := make(map[string][]*resource.Prepared, len(out.Resources))
	for typeURL, list := range out.Resources {
		if typeURL != typeurl.Endpoint {
			res[typeURL] = resource.Marshal(map[string][]gen.Resource{typeURL: list})[typeURL]
			continue
		}
		ps := make([]*resource.Prepared, 0, len(list))
		for _, r := range list {
			cla, _ := r.Message.(*endpointv3.ClusterLoadAssignment)
			k := weak.Make(cla) // a freed assignment's key never equals a new one's
			if p, ok := e.marshalled.Load(k); ok && cla != nil && p.(*resource.Prepared).Name == r.Name {
				ps = append(ps, p.(*resource.Prepared))
			} else if p := resource.Prepare(typeURL, r); p != nil {
				if cla != nil {
					// The State's equal Prepared, if any: an entry left
					// by a freed assignment holds no copy of its own.
					p = e.intern(map[string][]*resource.Prepared{typeURL: {p}})[typeURL][0]
					e.marshalled.Store(k, p)
				}
				ps = append(ps, p)
			}
		}
		res[typeURL] = ps
	}
	return res
}

// AllProblems returns the problems of the build and of every proxy
// generation so far, sorted.
func (e *Entry) AllProblems() []mesh.Problem {
	e.mu.Lock()
	out := append([]mesh.Problem(nil), e.State.Problems...)
	for p := range e.problems {
		if !slices.Contains(e.State.Problems, p) {
			out = append(out, p)
		}
	}
	e.mu.Unlock()
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
