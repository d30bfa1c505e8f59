package cache

import (
	"time"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen"
	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
	"github.com/navemesh/nave/xds/resource"
)

// NameTableFor returns the name table of proxies with key k (gen.NameTable),
// generating it on first use per name-table key (nameTableKey): proxies
// whose keys agree on what the table reads share it. A State whose
// snapshot differs from the one the key's last table was generated from
// only in endpoints the table does not read (those of hosts with an
// address) reuses that table, and a regenerated table equal to it is
// that table again: a push reaches an agent only when its table changed
// (decision 008). Safe for concurrent use.
func (e *Entry) NameTableFor(k proxy.Key) *resource.ProxyResources {
	nk := e.nameTableKey(k)
	pe := memoEntry(e, &e.tables, nk, k)
	pe.once.Do(func() {
		prev, ok := e.tableResults.get(nk)
		if ok && prev.res != nil && e.tableReusable(prev.snap) {
			pe.res = prev.res
			e.addProblems(prev.res.Problems)
			e.c.metrics.generations.WithLabelValues(genReused).Inc()
		} else {
			pe.res = e.generateNameTable(k, prev.res)
		}
		e.tableResults.put(nk, cachedResult{version: e.State.Version, snap: e.State.Snapshot, res: pe.res})
	})
	if e.c.opts.Verify {
		e.verifyOutput(k, pe.res, gen.NameTable(e.State.Snapshot, k))
	}
	return pe.res
}

func (e *Entry) generateNameTable(k proxy.Key, prev *resource.ProxyResources) *resource.ProxyResources {
	defer e.c.acquire(e.State.Mesh)()
	start := time.Now()
	out := gen.NameTable(e.State.Snapshot, k)
	e.addProblems(out.Problems)
	e.c.metrics.generations.WithLabelValues(genFull).Inc()
	e.c.metrics.proxyGenSeconds.Observe(time.Since(start).Seconds())
	byType := map[string]map[string]*resource.Prepared{}
	for typeURL, list := range resource.Marshal(out.Resources) {
		byType[typeURL] = map[string]*resource.Prepared{}
		for _, p := range list {
			byType[typeURL][p.Name] = p
		}
	}
	if prev != nil && sameTable(prev, byType) {
		return prev
	}
	return resource.New(byType, out.Problems)
}

// sameTable reports whether res holds exactly the name table in byType.
func sameTable(res *resource.ProxyResources, byType map[string]map[string]*resource.Prepared) bool {
	old, now := res.Resources[typeurl.NameTable], byType[typeurl.NameTable]
	if len(old) != len(now) {
		return false
	}
	for name, p := range now {
		if q := old[name]; q == nil || q.Hash != p.Hash {
			return false
		}
	}
	return true
}

// tableReusable reports whether a name table generated from snapshot
// prev is this State's too: the snapshots differ at most in Telemetry
// objects, DestinationRules, VirtualServices and in endpoints of hosts
// whose table entry does not read them.
func (e *Entry) tableReusable(prev *mesh.Snapshot) bool {
	snap := e.State.Snapshot
	if prev == snap {
		return true
	}
	e.mu.Lock()
	p := e.prev
	e.mu.Unlock()
	diff := e.State.Diff
	if p == nil || p.State.Snapshot != prev {
		diff = mesh.DiffSnapshots(prev, snap)
	}
	if diff.Config && diff.Rules == nil && diff.Routes == nil {
		return false // DestinationRules and VirtualServices it does not read
	}
	for h := range diff.Hosts {
		if svc := snap.Services[h]; svc == nil || tableReadsEndpoints(svc) {
			return false
		}
	}
	return true
}

// tableReadsEndpoints reports whether svc's name table entry may be made
// of its endpoints (nds: a headless Service, a ServiceEntry of resolution
// NONE without addresses).
func tableReadsEndpoints(svc *mesh.Service) bool {
	if svc.ClusterAddresses != nil {
		for _, list := range svc.ClusterAddresses {
			if len(list) == 0 {
				return true
			}
		}
		return false
	}
	return len(svc.Addresses) == 0 && svc.Resolution == mesh.ResolutionNone
}

// nameTableKey is the key a name table for k is memoized under: what the
// table reads of k (nds.Generate): its type, mesh, namespace and what its
// labels select (its Sidecar), its cluster (whose cluster IPs it gets)
// and network (headless answers), and, while the snapshot has
// auto-allocated addresses, its DNS capture and IP families. Every
// proxyless key shares one (empty) table.
func (e *Entry) nameTableKey(k proxy.Key) proxy.Key {
	if nk, ok := e.nameTableKeys.Load(k); ok {
		return nk.(proxy.Key)
	}
	nk := proxy.Key{Type: k.Type, Mesh: k.Mesh}
	if k.Type != proxy.GRPC {
		snap := e.State.Snapshot
		nk.Namespace, nk.Cluster, nk.Network = k.Namespace, k.Cluster, k.Network
		if sig := scope.LabelSignature(snap, k); sig != "" {
			nk.Labels = "selects:" + sig
		}
		if k.DNSCapture && snap.HasAutoAddresses() {
			nk.DNSCapture, nk.IPs = true, families(k)
		}
	}
	e.nameTableKeys.Store(k, nk)
	return nk
}

// families names k's IP families in a cache key (proxy.Key.IPFamilies):
// empty for IPv4 alone.
func families(k proxy.Key) string {
	switch v4, v6 := k.IPFamilies(); {
	case v4 && v6:
		return "|dual"
	case v6:
		return "|ipv6"
	}
	return ""
}
