package mesh

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	networking "istio.io/api/networking/v1alpha3"

	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/meshconfig"
)

// DomainSuffix completes short host names in config ("reviews" in namespace
// "shop" means reviews.shop.svc.cluster.local), as Istio does.
const DomainSuffix = "cluster.local"

// ClusterInput is one cluster's objects and connection state.
type ClusterInput struct {
	Name      string
	Connected bool
	Synced    bool
	Stale     bool
	Objects   []*meshconfig.Object
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
	clusters = append([]ClusterInput(nil), clusters...)
	sort.Slice(clusters, func(i, j int) bool { return clusters[i].Name < clusters[j].Name })

	s := &Snapshot{
		Mesh:             mesh,
		Services:         map[string]*Service{},
		VirtualServices:  map[string][]*Config{},
		DestinationRules: map[string][]*Config{},
	}
	stale := map[string]bool{}
	var registry []*Config
	candidates := map[string][]*Config{} // kind + key -> definitions
	for _, c := range clusters {
		s.Clusters = append(s.Clusters, ClusterState{Name: c.Name, Stale: c.Stale, Objects: len(c.Objects), Synced: c.Synced, Connected: c.Connected})
		stale[c.Name] = c.Stale
		for _, o := range c.Objects {
			cfg := &Config{Cluster: c.Name, Object: o}
			if o.Kind.Registry {
				registry = append(registry, cfg)
				continue
			}
			k := o.Kind.Kind + "/" + o.Key()
			candidates[k] = append(candidates[k], cfg)
		}
	}
	winners := s.resolveConflicts(candidates)

	byKind := map[string][]*Config{}
	for _, c := range winners {
		byKind[c.Object.Kind.Kind] = append(byKind[c.Object.Kind.Kind], c)
	}
	for _, c := range registry {
		byKind[c.Object.Kind.Kind] = append(byKind[c.Object.Kind.Kind], c)
	}
	for _, list := range byKind {
		sortConfigs(list)
	}

	s.addServiceEntries(byKind["ServiceEntry"], byKind["WorkloadEntry"], byKind["Workload"], stale)
	s.addRegistryServices(byKind["Service"], byKind["Workload"], stale)
	for _, svc := range s.Services {
		sort.Slice(svc.Endpoints, func(i, j int) bool { return endpointLess(svc.Endpoints[i], svc.Endpoints[j]) })
		sort.Slice(svc.Ports, func(i, j int) bool { return svc.Ports[i].Number < svc.Ports[j].Number })
		sort.Strings(svc.Sources)
	}

	for _, c := range byKind["VirtualService"] {
		for _, h := range c.VirtualService().GetHosts() {
			host := ResolveHost(h, c.Object.Namespace)
			s.VirtualServices[host] = append(s.VirtualServices[host], c)
		}
	}
	for _, c := range byKind["DestinationRule"] {
		host := ResolveHost(c.DestinationRule().GetHost(), c.Object.Namespace)
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
	s.AllVirtualServices = byKind["VirtualService"]
	s.Gateways = byKind["Gateway"]
	s.Sidecars = byKind["Sidecar"]
	return s
}

// ResolveHost completes a short host name relative to namespace.
func ResolveHost(host, namespace string) string {
	if host == "" || strings.Contains(host, ".") || strings.Contains(host, "*") {
		return host
	}
	return host + "." + namespace + ".svc." + DomainSuffix
}

func (s *Snapshot) resolveConflicts(candidates map[string][]*Config) []*Config {
	keys := make([]string, 0, len(candidates))
	for k := range candidates {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	winners := make([]*Config, 0, len(keys))
	for _, k := range keys {
		defs := candidates[k]
		sort.Slice(defs, func(i, j int) bool { return precedes(defs[i], defs[j]) })
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
	sort.Slice(list, func(i, j int) bool {
		a, b := list[i], list[j]
		if a.Object.Namespace != b.Object.Namespace || a.Object.Name != b.Object.Name {
			return a.Object.Key() < b.Object.Key()
		}
		return precedes(a, b)
	})
}

func (s *Snapshot) service(host, namespace string) *Service {
	svc := s.Services[host]
	if svc == nil {
		svc = &Service{Hostname: host, Namespace: namespace}
		s.Services[host] = svc
	}
	return svc
}

func (svc *Service) addPort(p Port) {
	for _, q := range svc.Ports {
		if q.Number == p.Number {
			return
		}
	}
	svc.Ports = append(svc.Ports, p)
}

func (s *Snapshot) addServiceEntries(entries, workloadEntries, workloads []*Config, stale map[string]bool) {
	for _, c := range entries {
		se, _ := c.Object.Spec.(*networking.ServiceEntry)
		ns := c.Object.Namespace
		ref := c.Ref()
		eps := make([]*Endpoint, 0, len(se.GetEndpoints()))
		for i, we := range se.GetEndpoints() {
			eps = append(eps, workloadEntryEndpoint(we, c.Object.Labels, c.Cluster, stale[c.Cluster], ref+" spec.endpoints["+strconv.Itoa(i)+"]"))
		}
		if sel := se.GetWorkloadSelector().GetLabels(); len(sel) > 0 {
			for _, wc := range workloadEntries {
				we, _ := wc.Object.Spec.(*networking.WorkloadEntry)
				labels := mergeLabels(wc.Object.Labels, we.GetLabels())
				if wc.Object.Namespace == ns && Matches(sel, labels) {
					eps = append(eps, workloadEntryEndpoint(we, wc.Object.Labels, wc.Cluster, stale[wc.Cluster], wc.Ref()))
				}
			}
			for _, wc := range workloads {
				if wc.Object.Namespace == ns && Matches(sel, wc.Object.Labels) {
					eps = append(eps, registryEndpoint(wc, stale[wc.Cluster]))
				}
			}
		}
		for _, h := range se.GetHosts() {
			host := ResolveHost(h, ns)
			svc := s.service(host, ns)
			svc.External = svc.External || se.GetLocation() == networking.ServiceEntry_MESH_EXTERNAL
			svc.Addresses = appendNew(svc.Addresses, se.GetAddresses()...)
			svc.ExportTo = se.GetExportTo()
			switch se.GetResolution() {
			case networking.ServiceEntry_NONE:
				svc.Resolution = ResolutionNone
			case networking.ServiceEntry_DNS:
				svc.Resolution = ResolutionDNS
			case networking.ServiceEntry_DNS_ROUND_ROBIN:
				svc.Resolution = ResolutionDNSRoundRb
			}
			svc.Sources = append(svc.Sources, ref)
			for _, p := range se.GetPorts() {
				svc.addPort(Port{Name: p.GetName(), Number: p.GetNumber(), Protocol: strings.ToUpper(p.GetProtocol()), TargetPort: p.GetTargetPort()})
			}
			svc.Endpoints = append(svc.Endpoints, eps...)
		}
	}
}

func (s *Snapshot) addRegistryServices(services, workloads []*Config, stale map[string]bool) {
	byHost := map[string][]*Config{}
	for _, wc := range workloads {
		w, _ := wc.Object.Spec.(*protocolv1.Workload)
		for _, h := range w.GetServices() {
			byHost[h] = append(byHost[h], wc)
		}
	}
	for _, c := range services {
		rs, _ := c.Object.Spec.(*protocolv1.Service)
		svc := s.service(rs.GetHostname(), c.Object.Namespace)
		svc.Sources = append(svc.Sources, c.Ref())
		svc.Addresses = appendNew(svc.Addresses, rs.GetAddresses()...)
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
			for _, wc := range workloads {
				if wc.Cluster == c.Cluster && wc.Object.Namespace == c.Object.Namespace && Matches(sel, wc.Object.Labels) {
					svc.Endpoints = append(svc.Endpoints, registryEndpoint(wc, stale[wc.Cluster]))
				}
			}
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
	w, _ := c.Object.Spec.(*protocolv1.Workload)
	health := Healthy
	switch w.GetHealth() {
	case protocolv1.Workload_NOT_READY:
		health = Unhealthy
	case protocolv1.Workload_TERMINATING:
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
