package mesh

import (
	"maps"
	"slices"
	"sort"
	"strings"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/shared/meshconfig"
	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
)

// builderState is what a Builder remembers of its last build so that the
// next one, when only WorkloadEntries changed, can update the services they
// feed instead of merging everything again, and when only
// DestinationRules or VirtualServices changed, can reuse everything but
// them.
type builderState struct {
	mesh     string
	clusters []ClusterState // names, stale, synced, connected (Objects ignored)
	objects  map[*meshconfig.Object]string
	// keys counts definitions per WorkloadEntry and DestinationRule
	// and VirtualService kind/namespace/name: an object defined in several clusters goes
	// through conflict resolution, which only a full build does.
	keys map[configKey]int
	// selectors are the definitions that select WorkloadEntries, by
	// namespace.
	selectors map[string][]*selecting
	// rules are the DestinationRules (conflict winners, sorted), and
	// ruleProblems how many of snap's Problems come before theirs (the
	// rules' problems come last).
	rules        []*Config
	ruleProblems int
	// routes are the VirtualServices (conflict winners, sorted), and
	// generated those translated from the Gateway API.
	routes, generated []*Config
	snap              *Snapshot
}

// selecting is a definition that selects WorkloadEntries: a ServiceEntry
// with a workload selector (entries of any cluster), or a registry
// Service with a selector (entries of its own cluster; registryentries.go).
type selecting struct {
	cfg      *Config
	selector map[string]string
	registry *meshconfigv1.Service // nil for a ServiceEntry
}

// selects reports whether the definition selects WorkloadEntry wc with
// (merged) labels, in the definition's namespace.
func (d *selecting) selects(wc *Config, labels map[string]string) bool {
	if d.registry != nil && !registrySelectable(d.cfg, wc) {
		return false
	}
	return Matches(d.selector, labels)
}

// hosts calls fn with each service host the definition feeds in s.
func (d *selecting) hosts(s *Snapshot, fn func(host string)) {
	if d.registry != nil {
		fn(d.registry.GetHostname())
		return
	}
	se, _ := d.cfg.Object.Spec.(*networking.ServiceEntry)
	for _, h := range se.GetHosts() {
		fn(s.ResolveHost(h, d.cfg))
	}
}

// endpoint is the endpoint of a selected entry (ep as the Builder made
// it) in the definition's services.
func (d *selecting) endpoint(ep *Endpoint) *Endpoint {
	if d.registry != nil {
		return registryEntryEndpoint(d.registry, ep)
	}
	return ep
}

// remember records a full build's inputs and result: its ServiceEntries,
// registry Services, DestinationRules and VirtualServices (its own and
// those generated), and how many problems it had before the rules'.
func (b *Builder) remember(mesh string, clusters []ClusterInput, entries, services, rules, routes, generated []*Config, ruleProblems int, s *Snapshot) {
	st := &builderState{mesh: mesh, objects: map[*meshconfig.Object]string{}, keys: map[configKey]int{},
		selectors: map[string][]*selecting{}, rules: rules, ruleProblems: ruleProblems, routes: routes, generated: generated, snap: s}
	for _, c := range clusters {
		cs := c.state()
		cs.Objects = 0
		st.clusters = append(st.clusters, cs)
		for _, o := range c.Objects {
			st.objects[o] = c.Name
			if o.Kind.Kind == "WorkloadEntry" || o.Kind.Kind == "DestinationRule" || o.Kind.Kind == "VirtualService" {
				st.keys[configKey{o.Kind.Kind, o.Namespace, o.Name}]++
			}
		}
	}
	for _, c := range entries {
		if se, _ := c.Object.Spec.(*networking.ServiceEntry); len(se.GetWorkloadSelector().GetLabels()) > 0 {
			st.selectors[c.Object.Namespace] = append(st.selectors[c.Object.Namespace], &selecting{cfg: c, selector: se.GetWorkloadSelector().GetLabels()})
		}
	}
	for _, c := range services {
		rs, _ := c.Object.Spec.(*meshconfigv1.Service)
		if sel := entrySelector(rs); len(sel) > 0 {
			st.selectors[c.Object.Namespace] = append(st.selectors[c.Object.Namespace], &selecting{cfg: c, selector: sel, registry: rs})
		}
	}
	b.last = st
}

type entryChange struct {
	cfg   *Config
	added bool
}

// changes returns the objects added and removed since the last build
// (at most 64; none when the last snapshot stands), when nothing else
// about the clusters changed; false when something did, or more changed:
// Build then merges everything.
func (b *Builder) changes(mesh string, clusters []ClusterInput) ([]entryChange, bool) {
	last := b.last
	if last == nil || last.mesh != mesh || len(clusters) != len(last.clusters) || last.snap.TrustDomain != b.trustDomain() ||
		last.snap.MeshConfig != b.MeshConfig || last.snap.MeshNetworks != b.MeshNetworks {
		return nil, false
	}
	seen := 0
	var changes []entryChange
	for i, c := range clusters {
		lc := last.clusters[i]
		if lc.Name != c.Name || lc.Stale != c.Stale || lc.Synced != c.Synced || lc.Connected != c.Connected || lc.DomainSuffix != c.suffix() {
			return nil, false
		}
		for _, o := range c.Objects {
			if cl, ok := last.objects[o]; ok && cl == c.Name {
				seen++
				continue
			}
			changes = append(changes, entryChange{&Config{Cluster: c.Name, Object: o}, true})
			if len(changes) > 64 {
				return nil, false // a large change: merge everything
			}
		}
	}
	if seen < len(last.objects) {
		// Some objects are gone: find them.
		present := make(map[*meshconfig.Object]bool, len(last.objects))
		for _, c := range clusters {
			for _, o := range c.Objects {
				present[o] = true
			}
		}
		for o, cl := range last.objects {
			if present[o] {
				continue
			}
			changes = append(changes, entryChange{&Config{Cluster: cl, Object: o}, false})
			if len(changes) > 64 {
				return nil, false
			}
		}
	}
	return changes, true
}

// onlyKinds reports whether every change is of an object of one of kinds.
func onlyKinds(changes []entryChange, kinds ...string) bool {
	return !slices.ContainsFunc(changes, func(ch entryChange) bool { return !slices.Contains(kinds, ch.cfg.Object.Kind.Kind) })
}

// singlyDefined returns how many definitions each changed object's key
// gains or loses, and false when a changed object is (or was) defined in
// several clusters: conflict resolution decides then. The remembered
// counts move on (moveOn) only once the build is sure to finish.
func (st *builderState) singlyDefined(changes []entryChange) (map[configKey]int, bool) {
	counts := map[configKey]int{}
	for _, ch := range changes {
		k := configKey{ch.cfg.Object.Kind.Kind, ch.cfg.Object.Namespace, ch.cfg.Object.Name}
		if ch.added {
			counts[k]++
		} else {
			counts[k]--
		}
	}
	for k, d := range counts {
		if st.keys[k]+d > 1 || st.keys[k] > 1 {
			return nil, false
		}
	}
	return counts, true
}

// moveOn records changes in the remembered objects, and counts (from
// singlyDefined) in the remembered definitions per key.
func (st *builderState) moveOn(changes []entryChange, counts map[configKey]int) {
	for _, ch := range changes {
		if ch.added {
			st.objects[ch.cfg.Object] = ch.cfg.Cluster
		} else {
			delete(st.objects, ch.cfg.Object)
		}
	}
	for k, d := range counts {
		if n := st.keys[k] + d; n > 0 {
			st.keys[k] = n
		} else {
			delete(st.keys, k)
		}
	}
}

// derived returns a snapshot holding prev's config and indexes, for an
// incremental build to replace what changed; its Clusters are clusters'.
func derived(prev *Snapshot, clusters []ClusterInput) *Snapshot {
	s := &Snapshot{
		Mesh: prev.Mesh, Services: prev.Services, VirtualServices: prev.VirtualServices,
		AllVirtualServices: prev.AllVirtualServices, DestinationRules: prev.DestinationRules,
		Gateways: prev.Gateways, Sidecars: prev.Sidecars, Conflicts: prev.Conflicts, Problems: prev.Problems,
		PeerAuthentications: prev.PeerAuthentications, RequestAuthentications: prev.RequestAuthentications,
		AuthorizationPolicies: prev.AuthorizationPolicies, Telemetries: prev.Telemetries, TrustDomain: prev.TrustDomain, DomainSuffixes: prev.DomainSuffixes,
		MeshConfig: prev.MeshConfig, MeshNetworks: prev.MeshNetworks, EnvoyFilters: prev.EnvoyFilters, GatewayAPIStatuses: prev.GatewayAPIStatuses,
		NetworkGateways: prev.NetworkGateways, networks: prev.networks,
		hostnames: prev.Hostnames(), sorted: prev.SortedServices(),
	}
	for _, c := range clusters {
		s.Clusters = append(s.Clusters, c.state())
	}
	return s
}

// buildRouting is Build when only DestinationRules and VirtualServices
// changed since the last build, each defined in one cluster only: the
// last snapshot's services, endpoints, address index and every other
// config are shared, and only the rules and VirtualServices by host (and
// the rules' problems) are made again. It returns nil when that does not
// hold.
func (b *Builder) buildRouting(clusters []ClusterInput, changes []entryChange) *Snapshot {
	last := b.last
	if !onlyKinds(changes, "DestinationRule", "VirtualService") {
		return nil
	}
	counts, ok := last.singlyDefined(changes)
	if !ok {
		return nil
	}
	rules, rulesChanged := applyChanges(last.rules, changes, "DestinationRule")
	routes, routesChanged := applyChanges(last.routes, changes, "VirtualService")

	prev := last.snap
	s := derived(prev, clusters)
	if rulesChanged {
		s.Problems = nil // as a full build has it when there are none
		if last.ruleProblems > 0 {
			s.Problems = slices.Clone(prev.Problems[:last.ruleProblems])
		}
		s.addDestinationRules(rules)
	}
	if routesChanged {
		s.addVirtualServices(routes, last.generated)
	}
	// The address index is prev's: the services are the same.
	s.atRoot, s.atOverlay, s.atDepth = prev, map[string][]*Service{}, 0
	if prev.atRoot != nil {
		s.atRoot, s.atOverlay, s.atDepth = prev.atRoot, prev.atOverlay, prev.atDepth
	}

	last.moveOn(changes, counts)
	last.rules, last.routes, last.snap = rules, routes, s
	return s
}

// applyChanges returns list (sorted configs) with the changes of objects
// of kind applied, sorted, and whether there were any.
func applyChanges(list []*Config, changes []entryChange, kind string) ([]*Config, bool) {
	gone := map[*meshconfig.Object]bool{}
	var added []*Config
	for _, ch := range changes {
		switch {
		case ch.cfg.Object.Kind.Kind != kind:
		case ch.added:
			added = append(added, ch.cfg)
		default:
			gone[ch.cfg.Object] = true
		}
	}
	if len(added) == 0 && len(gone) == 0 {
		return list, false
	}
	out := slices.DeleteFunc(slices.Clone(list), func(c *Config) bool { return gone[c.Object] })
	out = append(out, added...)
	if len(out) == 0 {
		return nil, true // as a full build has it
	}
	sortConfigs(out)
	return out, true
}

// buildEndpoints is Build when only WorkloadEntries changed since the last
// build, each defined in one cluster only: it copies the last snapshot and
// rebuilds just the endpoint lists of the services whose definitions
// (ServiceEntries with a workload selector, registry Services) select
// them, before or after the change. It returns nil when that does not
// hold; Build then merges everything.
func (b *Builder) buildEndpoints(clusters []ClusterInput, changes []entryChange) *Snapshot {
	last := b.last
	if !onlyKinds(changes, "WorkloadEntry") {
		return nil
	}
	stale := map[string]bool{}
	for _, c := range clusters {
		stale[c.Name] = c.Stale
	}
	counts, ok := last.singlyDefined(changes)
	if !ok {
		return nil // defined in several clusters: conflict resolution decides
	}

	// Gateways: those of changed entries go, their new ones come (an
	// entry whose gateway labels are wrong has a problem: a full build
	// reports it).
	gateways := last.snap.NetworkGateways
	if slices.ContainsFunc(changes, func(ch entryChange) bool { _, p, ok := entryGateway(ch.cfg); return ok || p != nil }) {
		gone := map[string]bool{}
		var added []NetworkGateway
		for _, ch := range changes {
			gw, problem, ok := entryGateway(ch.cfg)
			if problem != nil {
				return nil
			}
			if !ch.added {
				gone[ch.cfg.Ref()] = true
			} else if ok {
				added = append(added, gw)
			}
		}
		gateways = slices.DeleteFunc(slices.Clone(gateways), func(gw NetworkGateway) bool { return gone[gw.Source] })
		gateways = append(gateways, added...)
	}

	// The definitions each changed entry is (or was) selected by.
	affected := map[*selecting][]entryChange{}
	for _, ch := range changes {
		we, _ := ch.cfg.Object.Spec.(*networking.WorkloadEntry)
		labels := mergeLabels(ch.cfg.Object.Labels, we.GetLabels())
		for _, d := range last.selectors[ch.cfg.Object.Namespace] {
			if d.selects(ch.cfg, labels) {
				affected[d] = append(affected[d], ch)
			}
		}
	}
	// Per service: the entries whose endpoints go (every copy: a host may
	// have several selecting definitions), then the endpoints each
	// selecting definition adds, as a full build makes them.
	type edit struct {
		removed map[string]bool // entry refs
		added   []*Endpoint
	}
	prev := last.snap
	edits := map[string]*edit{}
	for d, chs := range affected {
		ok := true
		d.hosts(prev, func(host string) {
			if prev.Services[host] == nil {
				ok = false
				return
			}
			e := edits[host]
			if e == nil {
				e = &edit{removed: map[string]bool{}}
				edits[host] = e
			}
			for _, ch := range chs {
				if ch.added {
					e.added = append(e.added, d.endpoint(b.entryEndpoint(ch.cfg, stale)))
				} else {
					e.removed[ch.cfg.Ref()] = true
				}
			}
		})
		if !ok {
			return nil // cannot happen: a selecting definition always defines its hosts
		}
	}
	replaced := make(map[string]*Service, len(edits))
	for host, e := range edits {
		old := prev.Services[host]
		c := *old
		c.Endpoints = make([]*Endpoint, 0, len(old.Endpoints)+len(e.added))
		for _, ep := range old.Endpoints {
			if !e.removed[ep.Source] {
				c.Endpoints = append(c.Endpoints, ep)
			}
		}
		c.Endpoints = append(c.Endpoints, e.added...)
		sort.Slice(c.Endpoints, func(i, j int) bool { return endpointLess(c.Endpoints[i], c.Endpoints[j]) })
		replaced[host] = &c
	}

	s := derived(prev, clusters)
	s.Services = maps.Clone(prev.Services)
	maps.Copy(s.Services, replaced)
	if len(gateways) != len(prev.NetworkGateways) || (len(gateways) > 0 && &gateways[0] != &prev.NetworkGateways[0]) {
		s.setNetworks(gateways)
	}
	s.sorted = nil
	s.sorted = s.SortedServices()
	// The address index: the addresses of the changed services (before and
	// after) are answered from an overlay, the rest by the index of the
	// last fully indexed snapshot (the root). The overlay is copied forward
	// for up to 16 builds, then the index is built afresh; only the root is
	// kept alive, never a chain of snapshots.
	if prev.atDepth < 16 {
		s.atRoot, s.atDepth, s.atOverlay = prev, 1, map[string][]*Service{}
		if prev.atRoot != nil {
			s.atRoot, s.atDepth, s.atOverlay = prev.atRoot, prev.atDepth+1, maps.Clone(prev.atOverlay)
		}
		seen := map[string]bool{}
		for host, svc := range replaced {
			for _, list := range [][]*Endpoint{prev.Services[host].Endpoints, svc.Endpoints} {
				for _, ep := range list {
					if seen[ep.Address] {
						continue
					}
					seen[ep.Address] = true
					var at []*Service
					for _, cand := range prev.ServicesAt(ep.Address) {
						if replaced[cand.Hostname] == nil {
							at = append(at, cand)
						}
					}
					for _, r := range replaced {
						if slices.ContainsFunc(r.Endpoints, func(e *Endpoint) bool { return e.Address == ep.Address }) {
							at = append(at, r)
						}
					}
					slices.SortFunc(at, func(a, b *Service) int { return strings.Compare(a.Hostname, b.Hostname) })
					s.atOverlay[ep.Address] = at
				}
			}
		}
	}

	// Remember: the objects, keys and snapshot move on; selectors stay.
	last.moveOn(changes, counts)
	for _, ch := range changes {
		if !ch.added {
			delete(b.endpoints, endpointKey{ch.cfg.Object, ch.cfg.Cluster, stale[ch.cfg.Cluster]})
		}
	}
	last.snap = s
	return s
}

// entryEndpoint returns the endpoint of a selected WorkloadEntry, made
// once per object.
func (b *Builder) entryEndpoint(wc *Config, stale map[string]bool) *Endpoint {
	k := endpointKey{wc.Object, wc.Cluster, stale[wc.Cluster]}
	if ep := b.endpoints[k]; ep != nil {
		return ep
	}
	we, _ := wc.Object.Spec.(*networking.WorkloadEntry)
	ep := workloadEntryEndpoint(we, wc.Object.Labels, wc.Cluster, k.stale, wc.Ref())
	if b.endpoints == nil {
		b.endpoints = map[endpointKey]*Endpoint{}
	}
	b.endpoints[k] = ep
	return ep
}
