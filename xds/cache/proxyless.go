package cache

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen"
	"github.com/navemesh/nave/xds/proxy"
	"github.com/navemesh/nave/xds/resource"
)

// Proxyless returns the mesh-wide resources that proxyless gRPC clients
// receive, generating and marshalling them on first use (a mesh without
// proxyless clients never pays for them). Unchanged config reuses the
// previous State's; resources with equal bytes keep their identity.
func (e *Entry) Proxyless() *resource.ProxyResources {
	e.grpcOnce.Do(func() {
		defer e.c.acquire(e.State.Mesh)()
		// The mesh's newest proxyless result is the base, as for Envoy keys.
		key := proxy.Key{Type: proxy.GRPC, Mesh: e.State.Mesh}
		pg, diff, from := e.baseFrom(key)
		var res *resource.ProxyResources
		mode := genFull
		switch {
		case pg != nil && diff.Unchanged():
			res, mode = pg, genReused
		case pg != nil && !diff.Config:
			// Only endpoints changed: only those hosts' assignments.
			out := &gen.Output{Resources: map[string][]gen.Resource{typeurl.Endpoint: gen.GRPCEndpoints(e.State.Snapshot, diff.Hosts, gen.GRPCClient{})}}
			res, mode = resource.Derive(pg, e.intern(e.marshal(out)), out.Problems), genEndpoints
			if e.c.opts.Verify {
				e.verifyOutput(key, res, gen.GRPC(e.State.Snapshot))
			}
		case pg != nil && (diff.Rules != nil || diff.Routes != nil) && from != nil:
			// Only DestinationRules, VirtualServices (and endpoints)
			// changed: the rules' hosts' clusters and assignments, and
			// routes if the rules reach them or VirtualServices changed.
			out := gen.GRPCRoutingChanged(from, e.State.Snapshot, diff)
			e.addProblems(out.Problems)
			res, mode = resource.DeriveRemoving(pg, e.intern(e.marshal(out.Output)), out.Whole, out.Gone, out.Problems), genRules
			if e.c.opts.Verify {
				e.verifyOutput(key, res, gen.GRPC(e.State.Snapshot))
			}
		default:
			out := gen.GRPC(e.State.Snapshot)
			e.addProblems(out.Problems)
			var prevRes map[string]map[string]*resource.Prepared
			if pg != nil {
				prevRes = pg.Resources
			}
			res = resource.New(resource.MarshalReusing(out.Resources, prevRes), out.Problems)
		}
		e.c.metrics.generations.WithLabelValues(mode).Inc()
		e.results.put(key, cachedResult{version: e.State.Version, snap: e.State.Snapshot, res: res})
		e.setProxyless(res)
	})
	return e.grpc
}

// ProxylessFor returns what the proxyless client with key k receives:
// the resources of its client key (ProxylessClient: the mesh-wide
// Proxyless resources, with the assignments of clusters that balance by
// locality built for its locality and labels where the mesh's rules read
// them) and, when k's IPs serve some ports, the server listeners an xDS
// gRPC server on those ports asks for (gen.GRPCServerListeners: its
// PeerAuthentication and AuthorizationPolicies). The addition is
// generated once per cache key (labels and inbound ports, as for Envoy)
// and client key, and shares every other resource. Safe for concurrent
// use.
func (e *Entry) ProxylessFor(k proxy.Key) *resource.ProxyResources {
	k = e.locate(k)
	gk := e.clientKey(k)
	base := e.ProxylessClient(gk)
	ck := e.cacheKey(k) // memoized; its IPs say whether k's IPs serve ports
	if ck.IPs == "" {
		return base
	}
	sk := serverKey{ck, gk}
	pe := memoEntry(e, &e.servers, sk, k)
	pe.once.Do(func() {
		listeners, problems := gen.GRPCServerListeners(e.State.Snapshot, k)
		if len(listeners) == 0 {
			pe.res = base
			return
		}
		e.addProblems(problems)
		pe.res = resource.Combine(base, e.intern(resource.Marshal(map[string][]gen.Resource{typeurl.Listener: listeners})), problems)
	})
	if e.c.opts.Verify && pe.origin != k {
		// Shared with a key of other IPs or labels: must be equal.
		listeners, _ := gen.GRPCServerListeners(e.State.Snapshot, k)
		var diffs []string
		if got, want := len(pe.res.Resources[typeurl.Listener]), len(base.Resources[typeurl.Listener])+len(listeners); got != want {
			diffs = append(diffs, fmt.Sprintf("%s: %d listeners shared, %d from scratch", typeurl.Listener, got, want))
		}
		for _, p := range resource.Marshal(map[string][]gen.Resource{typeurl.Listener: listeners})[typeurl.Listener] {
			if q := pe.res.Resources[typeurl.Listener][p.Name]; q == nil || q.Hash != p.Hash {
				diffs = append(diffs, fmt.Sprintf("%s %s differs from a generation from scratch", typeurl.Listener, p.Name))
			}
		}
		if len(diffs) > 0 {
			e.c.mismatch(e.State, k, diffs)
		}
	}
	return pe.res
}

// serverKey memoizes a proxyless server's resources: its cache key (what
// its labels and IPs select) and its client key.
type serverKey struct{ cache, client proxy.Key }

// clientKey is the key proxyless client k's resources are generated for:
// the mesh, and of k's locality, network and labels only what the
// snapshot's locality load balancing reads (gen.GRPCClientReads). A mesh
// without such rules, and clients that know none of it, have the mesh
// key ({Type: GRPC, Mesh}) and share Proxyless; otherwise there is at
// most one key per locality (and label value compared) among the clients.
func (e *Entry) clientKey(k proxy.Key) proxy.Key {
	if gk, ok := e.clientKeys.Load(k); ok {
		return gk.(proxy.Key)
	}
	gk := proxy.Key{Type: proxy.GRPC, Mesh: e.State.Mesh}
	reads := gen.GRPCClientReads(e.State.Snapshot)
	if reads.Locality {
		gk.Locality = k.Locality
	}
	if reads.Network {
		gk.Network = k.Network
	}
	if reads.Cluster {
		gk.Cluster = k.Cluster
	}
	if len(reads.Labels) > 0 && k.Labels != "" {
		labels := k.LabelMap()
		var kept []string
		for _, name := range reads.Labels { // sorted
			if v, ok := labels[name]; ok {
				kept = append(kept, name+"="+v)
			}
		}
		gk.Labels = strings.Join(kept, "\n")
	}
	e.clientKeys.Store(k, gk)
	return gk
}

// ProxylessClient returns the resources of proxyless client key gk
// (clientKey): Proxyless for the mesh key; else Proxyless's with the
// assignments of clusters that balance by locality built for gk's
// locality, network and labels, generated once per key and State. As
// for Envoy keys, a key's newest result is the base of the next State's:
// unchanged config reuses it, and when only endpoints changed only those
// hosts' assignments are generated again for the key. Keys nobody asks
// for are dropped with their State (and from the mesh's results after a
// while).
func (e *Entry) ProxylessClient(gk proxy.Key) *resource.ProxyResources {
	mesh := e.Proxyless()
	if gk == (proxy.Key{Type: proxy.GRPC, Mesh: e.State.Mesh}) {
		return mesh
	}
	pe := memoEntry(e, &e.clients, gk, gk)
	pe.once.Do(func() {
		defer e.c.acquire(e.State.Mesh)()
		start := time.Now()
		c := gen.GRPCClient{Locality: gk.Locality, Network: gk.Network, Labels: gk.LabelMap(), Cluster: gk.Cluster}
		res, mode := e.generateClient(gk, c, mesh)
		if e.c.opts.Verify && mode != genReused {
			e.verifyOutput(gk, res, gen.GRPCFor(e.State.Snapshot, c))
		}
		pe.res = res
		e.results.put(gk, cachedResult{version: e.State.Version, snap: e.State.Snapshot, res: res})
		e.c.metrics.generations.WithLabelValues(mode).Inc()
		e.c.metrics.proxyGenSeconds.Observe(time.Since(start).Seconds())
	})
	return pe.res
}

// generateClient builds client key gk's resources (see ProxylessClient)
// given the mesh-wide ones.
func (e *Entry) generateClient(gk proxy.Key, c gen.GRPCClient, mesh *resource.ProxyResources) (*resource.ProxyResources, string) {
	pr, diff, _ := e.baseFrom(gk)
	switch {
	case pr != nil && diff.Unchanged():
		return pr, genReused
	case pr != nil && !diff.Config:
		out := &gen.Output{Resources: map[string][]gen.Resource{typeurl.Endpoint: gen.GRPCEndpoints(e.State.Snapshot, diff.Hosts, c)}}
		return resource.Derive(pr, e.intern(e.marshal(out)), nil), genEndpoints
	}
	out := gen.GRPCClientEndpoints(e.State.Snapshot, c)
	e.addProblems(out.Problems)
	byType := maps.Clone(mesh.Resources)
	eds := maps.Clone(mesh.Resources[typeurl.Endpoint])
	if eds == nil {
		eds = map[string]*resource.Prepared{}
	}
	// These assignments are the key's own (none memoized and shared, unlike
	// GRPCEndpoints'): marshalled without remembering the messages.
	for _, p := range e.intern(resource.Marshal(out.Resources))[typeurl.Endpoint] {
		eds[p.Name] = p
	}
	byType[typeurl.Endpoint] = eds
	problems := slices.Clone(mesh.Problems)
	for _, p := range out.Problems {
		if !slices.Contains(problems, p) {
			problems = append(problems, p)
		}
	}
	return resource.New(byType, problems), genFull
}

func (e *Entry) setProxyless(r *resource.ProxyResources) {
	e.mu.Lock()
	e.grpc = r
	e.mu.Unlock()
}
