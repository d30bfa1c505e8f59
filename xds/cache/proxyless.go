package cache

import (
	"fmt"

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
		defer e.c.acquire()()
		// The mesh's newest proxyless result is the base, as for Envoy keys.
		key := proxy.Key{Type: proxy.GRPC, Mesh: e.State.Mesh}
		pg, diff := e.base(key)
		var res *resource.ProxyResources
		mode := genFull
		switch {
		case pg != nil && diff.Unchanged():
			res, mode = pg, genReused
		case pg != nil && !diff.Config:
			// Only endpoints changed: only those hosts' assignments.
			out := &gen.Output{Resources: map[string][]gen.Resource{typeurl.Endpoint: gen.GRPCEndpoints(e.State.Snapshot, diff.Hosts)}}
			res, mode = resource.Derive(pg, e.intern(e.marshal(out)), out.Problems), genEndpoints
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

// ProxylessFor returns what the proxyless client with key k receives: the
// mesh-wide Proxyless resources and, when k's IPs serve some ports, the
// server listeners an xDS gRPC server on those ports asks for
// (gen.GRPCServerListeners: its PeerAuthentication and
// AuthorizationPolicies). The addition is generated once per cache key
// (labels and inbound ports, as for Envoy) and shares every other
// resource with Proxyless. Safe for concurrent use.
func (e *Entry) ProxylessFor(k proxy.Key) *resource.ProxyResources {
	base := e.Proxyless()
	ck := e.cacheKey(k) // memoized; its IPs say whether k's IPs serve ports
	if ck.IPs == "" {
		return base
	}
	e.mu.Lock()
	if e.servers == nil {
		e.servers = map[proxy.Key]*proxyEntry{}
	}
	pe := e.servers[ck]
	if pe == nil {
		pe = &proxyEntry{origin: k}
		e.servers[ck] = pe
	}
	e.mu.Unlock()
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

func (e *Entry) setProxyless(r *resource.ProxyResources) {
	e.mu.Lock()
	e.grpc = r
	e.mu.Unlock()
}
