package mesh

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/shared/meshconfig"
	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
	"github.com/navemesh/nave/xds/gatewayapi"
)

// ClusterInput is one cluster's objects and connection state.
type ClusterInput struct {
	Name      string
	Connected bool
	Synced    bool
	Stale     bool
	// DomainSuffix is the cluster's DNS suffix, as its spoke said; empty
	// means meshconfig.DefaultDomainSuffix.
	DomainSuffix string
	Objects      []*meshconfig.Object
}

// suffix is the cluster's DNS suffix.
func (c *ClusterInput) suffix() string {
	if c.DomainSuffix == "" {
		return meshconfig.DefaultDomainSuffix
	}
	return c.DomainSuffix
}

// state is what a snapshot records of the cluster.
func (c *ClusterInput) state() ClusterState {
	return ClusterState{Name: c.Name, Stale: c.Stale, Objects: len(c.Objects), Synced: c.Synced, Connected: c.Connected, DomainSuffix: c.suffix()}
}

// Build merges the clusters of one mesh into a Snapshot. It is a pure
// function of its arguments: the same input gives the same snapshot.
//
// Config kinds (everything but the registry's Service and Workload) defined
// under the same kind, namespace and name in several clusters with different
// content are resolved deterministically: the oldest creation time wins
// (objects without one count as newest), then the lexically smallest
// cluster name. Losers are listed in Conflicts. Registry services merge by
// hostname, and every cluster's workloads are kept.
func Build(mesh string, clusters []ClusterInput) *Snapshot {
	return new(Builder).Build(mesh, clusters)
}

// Builder builds snapshots like Build, and remembers between builds the
// services it converted from each ServiceEntry without a workload selector
// (keyed by the object, which ingest never modifies, and its cluster's
// staleness). An unchanged entry's services are then shared, not rebuilt:
// snapshots are immutable, so sharing is safe. The result is the same as
// Build's. Safe for use by one goroutine at a time.
type Builder struct {
	entries map[*meshconfig.Object]*entryServices
	// endpoints remembers the endpoint made of each WorkloadEntry selected
	// by a ServiceEntry (objects are never modified, endpoints never
	// either), so an unchanged entry is not converted again.
	endpoints map[endpointKey]*Endpoint
	// last is the previous build's input and result (see buildEndpoints).
	last *builderState
	// gatewayAPI translates the Gateway API objects, reusing its earlier
	// work (decoded specs, equal generated objects).
	gatewayAPI gatewayapi.Translator

	// TrustDomain is the mesh's SPIFFE trust domain, copied into every
	// snapshot (Snapshot.TrustDomain); empty means DefaultTrustDomain.
	// Whoever runs the mesh's CA sets it before building; changing it
	// between builds is a config change.
	TrustDomain string
	// MeshConfig is the mesh's MeshConfig, copied into every snapshot
	// (Snapshot.MeshConfig; nil means Istio's defaults). Its trustDomain,
	// when set, is the snapshot's trust domain in place of TrustDomain.
	// Changing it between builds is a config change; it must not be
	// modified once given.
	MeshConfig *meshv1alpha1.MeshConfig
	// MeshNetworks is the mesh's Istio MeshNetworks (the networks of its
	// clusters and their gateways; docs/multi-network.md), copied into
	// every snapshot (Snapshot.MeshNetworks; nil means none configured).
	// Changing it between builds is a config change; it must not be
	// modified once given.
	MeshNetworks *meshv1alpha1.MeshNetworks
}

type endpointKey struct {
	object  *meshconfig.Object
	cluster string
	stale   bool
}

type entryServices struct {
	cluster  string
	stale    bool
	services []*Service // one per host, complete and sorted
}

// Build merges the clusters of one mesh into a Snapshot (see Build).
func (b *Builder) Build(mesh string, clusters []ClusterInput) *Snapshot {
	clusters = append([]ClusterInput(nil), clusters...)
	sort.Slice(clusters, func(i, j int) bool { return clusters[i].Name < clusters[j].Name })
	if changes, ok := b.changes(mesh, clusters); ok {
		if len(changes) == 0 {
			// Nothing changed (a notification whose change the last
			// build already took along): the same input gives the same
			// snapshot.
			return b.last.snap
		}
		if s := b.buildEndpoints(clusters, changes); s != nil {
			return s
		}
		if s := b.buildRouting(clusters, changes); s != nil {
			return s
		}
	}

	s := &Snapshot{
		Mesh:             mesh,
		Services:         map[string]*Service{},
		VirtualServices:  map[string][]*Config{},
		DestinationRules: map[string][]*Config{},
		TrustDomain:      b.trustDomain(),
		MeshConfig:       b.MeshConfig,
		MeshNetworks:     b.MeshNetworks,
		DomainSuffixes:   map[string]string{},
	}
	stale := map[string]bool{}
	var registry []*Config
	candidates := map[configKey][]*Config{} // definitions of each kind/namespace/name
	for _, c := range clusters {
		s.Clusters = append(s.Clusters, c.state())
		s.DomainSuffixes[c.Name] = c.suffix()
		stale[c.Name] = c.Stale
		for _, o := range c.Objects {
			cfg := &Config{Cluster: c.Name, Object: o}
			if o.Kind.Registry {
				registry = append(registry, cfg)
				continue
			}
			k := configKey{o.Kind.Kind, o.Namespace, o.Name}
			candidates[k] = append(candidates[k], cfg)
		}
	}
	winners := s.resolveConflicts(candidates)

	byKind := map[string][]*Config{}
	for _, c := range winners {
		if c.Object.Kind.GatewayAPI {
			continue // translated below
		}
		byKind[c.Object.Kind.Kind] = append(byKind[c.Object.Kind.Kind], c)
	}
	for _, c := range registry {
		byKind[c.Object.Kind.Kind] = append(byKind[c.Object.Kind.Kind], c)
	}
	for _, list := range byKind {
		sortConfigs(list)
	}

	s.shared = map[*Service]bool{}
	var index *selectIndex
	nextEndpoints := make(map[endpointKey]*Endpoint, len(b.endpoints))
	selector := func() *selectIndex { // built on first use
		if index == nil {
			index = newSelectIndex(byKind["WorkloadEntry"], byKind["Workload"])
			index.entryEndpoint = func(wc *Config) *Endpoint {
				k := endpointKey{wc.Object, wc.Cluster, stale[wc.Cluster]}
				ep := b.endpoints[k]
				if ep == nil {
					we, _ := wc.Object.Spec.(*networking.WorkloadEntry)
					ep = workloadEntryEndpoint(we, wc.Object.Labels, wc.Cluster, k.stale, wc.Ref())
				}
				nextEndpoints[k] = ep
				return ep
			}
		}
		return index
	}
	b.addServiceEntries(s, byKind["ServiceEntry"], selector, stale)
	s.addRegistryServices(byKind["Service"], byKind["Workload"], selector, stale)
	b.endpoints = nextEndpoints
	s.setNetworks(s.gateways(byKind["Service"], byKind["WorkloadEntry"]))
	for _, svc := range s.Services {
		if s.shared[svc] {
			continue // built complete and sorted
		}
		sort.Slice(svc.Endpoints, func(i, j int) bool { return endpointLess(svc.Endpoints[i], svc.Endpoints[j]) })
		sort.Slice(svc.Ports, func(i, j int) bool { return svc.Ports[i].Number < svc.Ports[j].Number })
		sort.Strings(svc.Sources)
	}

	s.allocateAddresses()

	generated, gateways := b.translateGatewayAPI(s, candidates)
	if len(gateways) > 0 {
		byKind["Gateway"] = append(byKind["Gateway"], gateways...)
		sortConfigs(byKind["Gateway"])
	}
	routes := byKind["VirtualService"]
	s.addVirtualServices(routes, generated)
	ruleProblems := len(s.Problems)
	s.addDestinationRules(byKind["DestinationRule"])
	s.shared = nil
	s.hostnames = s.Hostnames()
	s.sorted = s.SortedServices()
	s.Gateways = byKind["Gateway"]
	s.Sidecars = byKind["Sidecar"]
	s.PeerAuthentications = byKind["PeerAuthentication"]
	s.RequestAuthentications = byKind["RequestAuthentication"]
	s.AuthorizationPolicies = byKind["AuthorizationPolicy"]
	s.Telemetries = byKind["Telemetry"]
	s.EnvoyFilters = byKind["EnvoyFilter"]
	b.remember(mesh, clusters, byKind["ServiceEntry"], byKind["Service"], byKind["DestinationRule"], routes, generated, ruleProblems, s)
	return s
}

// addVirtualServices indexes routes (the VirtualServices, sorted) and
// generated (those translated from the Gateway API, consumer routes
// first) by the hosts they name, in that order, and lists them all
// sorted (AllVirtualServices).
func (s *Snapshot) addVirtualServices(routes, generated []*Config) {
	s.VirtualServices = map[string][]*Config{}
	all := slices.Concat(routes, generated)
	for _, c := range all {
		for _, h := range c.VirtualService().GetHosts() {
			host := s.ResolveHost(h, c)
			s.VirtualServices[host] = append(s.VirtualServices[host], c)
		}
	}
	if len(generated) > 0 {
		sortConfigs(all)
		s.AllVirtualServices = all
	} else {
		s.AllVirtualServices = routes
	}
}

// addDestinationRules indexes rules (sorted) by the host they name, and
// reports those that another rule of the same host and namespace comes
// before. They are the last of a build's problems (buildRules relies on
// it).
func (s *Snapshot) addDestinationRules(rules []*Config) {
	s.DestinationRules = map[string][]*Config{}
	for _, c := range rules {
		host := s.ResolveHost(c.DestinationRule().GetHost(), c)
		list := s.DestinationRules[host]
		for _, prev := range list {
			if prev.Object.Namespace == c.Object.Namespace {
				// Istio merges same-namespace rules only in some cases;
				// one per (host, namespace) is the clear rule.
				s.Problems = append(s.Problems, Problem{Resource: c.Ref(), Field: "spec.host",
					Reason: fmt.Sprintf("host %s already has DestinationRule %s in namespace %s; this one is ignored", host, prev.Ref(), c.Object.Namespace)})
				c = nil
				break
			}
		}
		if c != nil {
			s.DestinationRules[host] = append(list, c)
		}
	}
}

func (b *Builder) trustDomain() string {
	return meshTrustDomain(b.MeshConfig, b.TrustDomain)
}

type configKey struct{ kind, namespace, name string }

func (s *Snapshot) resolveConflicts(candidates map[configKey][]*Config) []*Config {
	// Winners are sorted by the caller (per kind); conflicts are sorted here.
	winners := make([]*Config, 0, len(candidates))
	for _, defs := range candidates {
		if len(defs) > 1 {
			sort.Slice(defs, func(i, j int) bool { return precedes(defs[i], defs[j]) })
		}
		w := defs[0]
		winners = append(winners, w)
		for _, l := range defs[1:] {
			if l.Object.Version == w.Object.Version {
				continue // the same definition in several clusters agrees
			}
			s.Conflicts = append(s.Conflicts, Conflict{
				Kind: w.Object.Kind.Kind, Key: w.Object.Key(),
				WinnerCluster: w.Cluster, LoserCluster: l.Cluster,
				Reason: conflictReason(w, l),
			})
		}
	}
	slices.SortFunc(s.Conflicts, func(a, b Conflict) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Key, b.Key), cmp.Compare(a.LoserCluster, b.LoserCluster))
	})
	return winners
}

func conflictReason(w, l *Config) string {
	wt, lt := w.Object.CreationTime, l.Object.CreationTime
	if !wt.Equal(lt) {
		return fmt.Sprintf("defined differently; %s's is older (%s)", w.Cluster, timeOrUnset(wt))
	}
	return fmt.Sprintf("defined differently with equal creation times; %s sorts first", w.Cluster)
}

func timeOrUnset(t time.Time) string {
	if t.IsZero() {
		return "unset"
	}
	return t.UTC().Format(time.RFC3339)
}

// precedes orders definitions: oldest creation time first (unset last),
// then cluster name, then origin.
func precedes(a, b *Config) bool {
	at, bt := a.Object.CreationTime, b.Object.CreationTime
	if at.IsZero() != bt.IsZero() {
		return !at.IsZero()
	}
	if !at.Equal(bt) {
		return at.Before(bt)
	}
	if a.Cluster != b.Cluster {
		return a.Cluster < b.Cluster
	}
	return a.Object.Origin < b.Object.Origin
}

func sortConfigs(list []*Config) {
	slices.SortFunc(list, func(a, b *Config) int {
		if c := cmp.Or(cmp.Compare(a.Object.Namespace, b.Object.Namespace), cmp.Compare(a.Object.Name, b.Object.Name)); c != 0 {
			return c
		}
		if precedes(a, b) {
			return -1
		}
		if precedes(b, a) {
			return 1
		}
		return 0
	})
}

func (s *Snapshot) service(host, namespace string) *Service {
	svc := s.Services[host]
	if s.shared[svc] {
		delete(s.shared, svc)
		svc = svc.clone()
		s.Services[host] = svc
	}
	if svc == nil {
		svc = &Service{Hostname: host, Namespace: namespace}
		s.Services[host] = svc
	}
	return svc
}

// clone returns a copy of svc that can be modified without touching svc.
func (svc *Service) clone() *Service {
	c := *svc
	c.Ports = slices.Clone(svc.Ports)
	c.Endpoints = slices.Clone(svc.Endpoints)
	c.Sources = slices.Clone(svc.Sources)
	c.Addresses = slices.Clone(svc.Addresses)
	c.ClusterAddresses = maps.Clone(svc.ClusterAddresses)
	c.SubjectAltNames = slices.Clone(svc.SubjectAltNames)
	return &c
}

func (svc *Service) addPort(p Port) {
	for _, q := range svc.Ports {
		if q.Number == p.Number {
			return
		}
	}
	svc.Ports = append(svc.Ports, p)
}

// addServiceEntries adds the services of every ServiceEntry. Entries
// without a workload selector convert to services on their own; those are
// remembered in b and shared across snapshots. It returns the shared
// services in s.shared.
func (b *Builder) addServiceEntries(s *Snapshot, entries []*Config, selector func() *selectIndex, stale map[string]bool) {
	next := make(map[*meshconfig.Object]*entryServices, len(entries))
	for _, c := range entries {
		se, _ := c.Object.Spec.(*networking.ServiceEntry)
		if len(se.GetWorkloadSelector().GetLabels()) > 0 {
			s.addServiceEntry(c, se, selector(), stale)
			continue
		}
		es := b.entries[c.Object]
		if es == nil || es.cluster != c.Cluster || es.stale != stale[c.Cluster] {
			single := &Snapshot{Services: map[string]*Service{}, shared: map[*Service]bool{}}
			single.addServiceEntry(c, se, nil, stale)
			es = &entryServices{cluster: c.Cluster, stale: stale[c.Cluster]}
			for _, h := range single.Hostnames() {
				svc := single.Services[h]
				sort.Slice(svc.Endpoints, func(i, j int) bool { return endpointLess(svc.Endpoints[i], svc.Endpoints[j]) })
				sort.Slice(svc.Ports, func(i, j int) bool { return svc.Ports[i].Number < svc.Ports[j].Number })
				if svc.autoEligible() {
					// What the snapshot's allocation gives it unless
					// another host collides: no clone then.
					svc.setAutoSlot(autoPreferred(svc.Hostname))
				}
				es.services = append(es.services, svc)
			}
		}
		next[c.Object] = es
		for _, svc := range es.services {
			if s.Services[svc.Hostname] == nil {
				s.Services[svc.Hostname] = svc
				s.shared[svc] = true
				continue
			}
			s.service(svc.Hostname, svc.Namespace).merge(svc)
		}
	}
	b.entries = next
}

// merge adds o's definition of the same host to svc.
func (svc *Service) merge(o *Service) {
	svc.External = svc.External || o.External
	svc.Addresses = appendNew(svc.Addresses, o.Addresses...)
	svc.auto = svc.auto.merge(o.auto)
	svc.SubjectAltNames = appendNew(svc.SubjectAltNames, o.SubjectAltNames...)
	if o.ExportTo != nil {
		svc.ExportTo = o.ExportTo
	}
	if o.Resolution != ResolutionStatic {
		svc.Resolution = o.Resolution
	}
	svc.Sources = append(svc.Sources, o.Sources...)
	for _, p := range o.Ports {
		svc.addPort(p)
	}
	svc.Endpoints = append(svc.Endpoints, o.Endpoints...)
}

// addServiceEntry adds the services of one ServiceEntry.
func (s *Snapshot) addServiceEntry(c *Config, se *networking.ServiceEntry, index *selectIndex, stale map[string]bool) {
	ns := c.Object.Namespace
	ref := c.Ref()
	eps := make([]*Endpoint, 0, len(se.GetEndpoints()))
	for i, we := range se.GetEndpoints() {
		eps = append(eps, workloadEntryEndpoint(we, c.Object.Labels, c.Cluster, stale[c.Cluster], ref+" spec.endpoints["+strconv.Itoa(i)+"]"))
	}
	if sel := se.GetWorkloadSelector().GetLabels(); len(sel) > 0 && index != nil {
		index.selectEntries(ns, sel, func(wc *Config) {
			eps = append(eps, index.entryEndpoint(wc))
		})
		index.selectWorkloads(ns, sel, func(wc *Config) {
			eps = append(eps, registryEndpoint(wc, stale[wc.Cluster]))
		})
	}
	o := &Service{External: se.GetLocation() == networking.ServiceEntry_MESH_EXTERNAL, Addresses: se.GetAddresses(),
		ExportTo: se.GetExportTo(), SubjectAltNames: se.GetSubjectAltNames(), Sources: []string{ref}, Endpoints: eps,
		auto: autoAllocation{entry: true, since: c.Object.CreationTime, optOut: strings.EqualFold(c.Object.Labels[AutoAllocateLabel], "false")}}
	switch se.GetResolution() {
	case networking.ServiceEntry_NONE:
		o.Resolution = ResolutionNone
	case networking.ServiceEntry_DNS:
		o.Resolution = ResolutionDNS
	case networking.ServiceEntry_DNS_ROUND_ROBIN:
		o.Resolution = ResolutionDNSRoundRb
	}
	for _, p := range se.GetPorts() {
		o.addPort(Port{Name: p.GetName(), Number: p.GetNumber(), Protocol: strings.ToUpper(p.GetProtocol()), TargetPort: p.GetTargetPort()})
	}
	for _, h := range se.GetHosts() {
		svc := s.service(s.ResolveHost(h, c), ns)
		svc.merge(o)
	}
}

func (s *Snapshot) addRegistryServices(services, workloads []*Config, selector func() *selectIndex, stale map[string]bool) {
	byHost := map[string][]*Config{}
	for _, wc := range workloads {
		w, _ := wc.Object.Spec.(*meshconfigv1.Workload)
		for _, h := range w.GetServices() {
			byHost[h] = append(byHost[h], wc)
		}
	}
	for _, c := range services {
		rs, _ := c.Object.Spec.(*meshconfigv1.Service)
		svc := s.service(rs.GetHostname(), c.Object.Namespace)
		svc.Sources = append(svc.Sources, c.Ref())
		svc.Addresses = appendNew(svc.Addresses, rs.GetAddresses()...)
		if svc.ClusterAddresses == nil {
			svc.ClusterAddresses = map[string][]string{}
		}
		svc.ClusterAddresses[c.Cluster] = appendNew(svc.ClusterAddresses[c.Cluster], rs.GetAddresses()...)
		if name := rs.GetExternalName(); name != "" {
			svc.Resolution = ResolutionDNS
			svc.Endpoints = append(svc.Endpoints, &Endpoint{Address: name, Health: Healthy, Cluster: c.Cluster, Stale: stale[c.Cluster], Source: c.Ref()})
		}
		for _, p := range rs.GetPorts() {
			svc.addPort(Port{Name: p.GetName(), Number: p.GetNumber(), Protocol: strings.ToUpper(p.GetProtocol()), TargetPort: p.GetTargetPort()})
		}
		listed := byHost[rs.GetHostname()]
		for _, wc := range listed {
			if wc.Cluster == c.Cluster {
				svc.Endpoints = append(svc.Endpoints, registryEndpoint(wc, stale[wc.Cluster]))
			}
		}
		if sel := rs.GetSelector(); len(sel) > 0 && len(listed) == 0 {
			selector().selectWorkloads(c.Object.Namespace, sel, func(wc *Config) {
				if wc.Cluster == c.Cluster {
					svc.Endpoints = append(svc.Endpoints, registryEndpoint(wc, stale[wc.Cluster]))
				}
			})
		}
		if sel := entrySelector(rs); len(sel) > 0 {
			index := selector()
			index.selectEntries(c.Object.Namespace, sel, func(wc *Config) {
				if registrySelectable(c, wc) {
					svc.Endpoints = append(svc.Endpoints, registryEntryEndpoint(rs, index.entryEndpoint(wc)))
				}
			})
		}
	}
}

func workloadEntryEndpoint(we *networking.WorkloadEntry, metaLabels map[string]string, cluster string, stale bool, source string) *Endpoint {
	return &Endpoint{
		Address:        we.GetAddress(),
		Ports:          we.GetPorts(),
		Labels:         mergeLabels(metaLabels, we.GetLabels()),
		Locality:       ParseLocality(we.GetLocality()),
		Network:        we.GetNetwork(),
		Weight:         we.GetWeight(),
		Health:         Healthy,
		Cluster:        cluster,
		Stale:          stale,
		ServiceAccount: we.GetServiceAccount(),
		Source:         source,
	}
}

func registryEndpoint(c *Config, stale bool) *Endpoint {
	w, _ := c.Object.Spec.(*meshconfigv1.Workload)
	health := Healthy
	switch w.GetHealth() {
	case meshconfigv1.Workload_NOT_READY:
		health = Unhealthy
	case meshconfigv1.Workload_TERMINATING:
		health = Terminating
	}
	l := w.GetLocality()
	return &Endpoint{
		Address:        w.GetAddress(),
		Ports:          w.GetPorts(),
		Labels:         c.Object.Labels,
		Locality:       Locality{Region: l.GetRegion(), Zone: l.GetZone(), Subzone: l.GetSubzone()},
		Network:        w.GetNetwork(),
		Weight:         w.GetWeight(),
		Health:         health,
		Cluster:        c.Cluster,
		Stale:          stale,
		ServiceAccount: w.GetServiceAccount(),
		Source:         c.Ref(),
	}
}

// ParseLocality parses "region/zone/subzone".
func ParseLocality(s string) Locality {
	parts := strings.SplitN(s, "/", 3)
	var l Locality
	if len(parts) > 0 {
		l.Region = parts[0]
	}
	if len(parts) > 1 {
		l.Zone = parts[1]
	}
	if len(parts) > 2 {
		l.Subzone = parts[2]
	}
	return l
}

// String renders the locality as "region/zone/subzone".
func (l Locality) String() string {
	return strings.TrimRight(l.Region+"/"+l.Zone+"/"+l.Subzone, "/")
}

func appendNew(list []string, add ...string) []string {
	for _, a := range add {
		found := false
		for _, l := range list {
			found = found || l == a
		}
		if !found {
			list = append(list, a)
		}
	}
	return list
}

func mergeLabels(a, b map[string]string) map[string]string {
	if len(a) == 0 {
		return b
	}
	if len(b) == 0 {
		return a
	}
	out := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func endpointLess(a, b *Endpoint) bool {
	if a.Cluster != b.Cluster {
		return a.Cluster < b.Cluster
	}
	if a.Address != b.Address {
		return a.Address < b.Address
	}
	return a.Source < b.Source
}
