package mesh

import (
	"maps"
	"slices"
)

// Diff is how a snapshot differs from an earlier one of the same mesh,
// for generators that reuse earlier output.
type Diff struct {
	// Config is true when anything but endpoints changed: routing config,
	// gateways, sidecars, security policies, the trust domain, the
	// MeshConfig or MeshNetworks (compared by value), or a service itself (added, removed, ports,
	// addresses (auto-allocated ones too), resolution, export, subject alt names, sources). Then nothing can be reused,
	// unless Rules or Routes say what changed.
	Config bool
	// Rules and Routes, when Config is true only because DestinationRules
	// or VirtualServices changed, say what did (Telemetry, Hosts and
	// Addresses are then filled as when Config is false); both are nil
	// otherwise. Rules are the hosts whose DestinationRules changed (a
	// rule added, removed or edited under that host): what a proxy
	// resolves for any other host, in any namespace, is the same. Routes
	// are the VirtualServices added, removed or replaced (the earlier
	// object and the new one).
	Rules  map[string]bool
	Routes []*Config
	// Telemetry is true when Telemetry objects changed (Config false):
	// they shape only listeners (access logs, tracing, stats filters),
	// so the other resources may be reused.
	Telemetry bool
	// Hosts are the services whose endpoints changed (Config false),
	// or the gateways that stand for them on other networks (split-horizon
	// EDS: a gateway that moved changes only endpoints).
	Hosts map[string]bool
	// Addresses are the endpoint addresses that appeared, vanished or
	// changed in those services: a proxy whose own IP is among them may see
	// its inbound ports change.
	Addresses map[string]bool
}

// Unchanged reports whether the snapshots generate the same config.
func (d Diff) Unchanged() bool { return !d.Config && !d.Telemetry && len(d.Hosts) == 0 }

// DiffSnapshots compares next with prev. Config objects are compared by
// identity (ingest never modifies an object; a change is a new object), so
// the comparison is cheap; endpoints are compared by value.
func DiffSnapshots(prev, next *Snapshot) Diff {
	d := Diff{Hosts: map[string]bool{}, Addresses: map[string]bool{}}
	if prev == nil || next == nil || prev.Mesh != next.Mesh ||
		!sameConfigs(prev.Gateways, next.Gateways) || !sameConfigs(prev.Sidecars, next.Sidecars) ||
		!sameConfigs(prev.PeerAuthentications, next.PeerAuthentications) ||
		!sameConfigs(prev.RequestAuthentications, next.RequestAuthentications) ||
		!sameConfigs(prev.AuthorizationPolicies, next.AuthorizationPolicies) ||
		!sameConfigs(prev.EnvoyFilters, next.EnvoyFilters) || prev.TrustDomain != next.TrustDomain ||
		!sameMeshMessage(prev.MeshConfig, next.MeshConfig) || !sameMeshMessage(prev.MeshNetworks, next.MeshNetworks) || !maps.Equal(prev.DomainSuffixes, next.DomainSuffixes) ||
		len(prev.Services) != len(next.Services) {
		d.Config = true
		return d
	}
	if !sameConfigs(prev.AllVirtualServices, next.AllVirtualServices) || !sameConfigMap(prev.VirtualServices, next.VirtualServices) {
		d.Config, d.Routes = true, changedConfigs(prev.AllVirtualServices, next.AllVirtualServices)
		if len(d.Routes) == 0 {
			// The same VirtualServices by other hosts: the domain
			// suffixes cannot have changed, so this does not happen;
			// generate everything if it does.
			return Diff{Config: true}
		}
	}
	if rules := changedRules(prev.DestinationRules, next.DestinationRules); len(rules) > 0 {
		d.Config, d.Rules = true, rules
	}
	d.Telemetry = !sameConfigs(prev.Telemetries, next.Telemetries)
	gwNetworks, gwAll := gatewayChanges(prev, next)
	for host, n := range next.Services {
		p, ok := prev.Services[host]
		if !ok || !sameShape(p, n) {
			return Diff{Config: true}
		}
		if p == n || slices.EqualFunc(p.Endpoints, n.Endpoints, sameEndpoint) {
			if gwAll || (len(gwNetworks) > 0 && slices.ContainsFunc(n.Endpoints, func(e *Endpoint) bool { return gwNetworks[next.NetworkOf(e)] })) {
				// The gateways that stand for its endpoints changed.
				d.Hosts[host] = true
			}
			continue
		}
		d.Hosts[host] = true
		old := make(map[string]*Endpoint, len(p.Endpoints))
		for _, e := range p.Endpoints {
			old[e.Address+"\x00"+e.Cluster] = e
		}
		for _, e := range n.Endpoints {
			k := e.Address + "\x00" + e.Cluster
			if o, ok := old[k]; !ok || !sameEndpoint(o, e) {
				d.Addresses[e.Address] = true
			}
			delete(old, k)
		}
		for _, e := range old {
			d.Addresses[e.Address] = true
		}
	}
	return d
}

func sameConfigs(a, b []*Config) bool {
	return slices.EqualFunc(a, b, func(x, y *Config) bool { return x.Object == y.Object && x.Cluster == y.Cluster })
}

func sameConfigMap(a, b map[string][]*Config) bool {
	return maps.EqualFunc(a, b, sameConfigs)
}

// changedConfigs returns the configs of a not in b and those of b not in
// a (by identity).
func changedConfigs(a, b []*Config) []*Config {
	type id struct {
		object  any
		cluster string
	}
	in := func(list []*Config) map[id]bool {
		m := make(map[id]bool, len(list))
		for _, c := range list {
			m[id{c.Object, c.Cluster}] = true
		}
		return m
	}
	inA, inB := in(a), in(b)
	var out []*Config
	for _, c := range a {
		if !inB[id{c.Object, c.Cluster}] {
			out = append(out, c)
		}
	}
	for _, c := range b {
		if !inA[id{c.Object, c.Cluster}] {
			out = append(out, c)
		}
	}
	return out
}

// changedRules returns the hosts whose DestinationRules differ between a
// and b (nil when none do). A rule is looked up only under the host it
// names (Snapshot.DestinationRule), so no other host resolves differently.
func changedRules(a, b map[string][]*Config) map[string]bool {
	var out map[string]bool
	add := func(host string) {
		if out == nil {
			out = map[string]bool{}
		}
		out[host] = true
	}
	for host, list := range a {
		if !sameConfigs(list, b[host]) {
			add(host)
		}
	}
	for host := range b {
		if _, ok := a[host]; !ok {
			add(host)
		}
	}
	return out
}

// sameShape compares everything of a service but its endpoints.
func sameShape(a, b *Service) bool {
	return a == b || (a.Hostname == b.Hostname && a.Namespace == b.Namespace && a.External == b.External &&
		a.Resolution == b.Resolution && slices.Equal(a.Ports, b.Ports) && slices.Equal(a.Addresses, b.Addresses) &&
		slices.Equal(a.AutoAddresses, b.AutoAddresses) && maps.EqualFunc(a.ClusterAddresses, b.ClusterAddresses, slices.Equal[[]string]) &&
		slices.Equal(a.ExportTo, b.ExportTo) && slices.Equal(a.SubjectAltNames, b.SubjectAltNames) && slices.Equal(a.Sources, b.Sources))
}

// sameEndpoint compares what generators read of two endpoints: not Stale,
// which only says that the endpoint's cluster is away (within its grace
// period) and changes nothing a proxy receives — a spoke's flap must not
// regenerate the endpoints of every service it has.
func sameEndpoint(a, b *Endpoint) bool {
	return a == b || (a.Address == b.Address && a.Locality == b.Locality && a.Network == b.Network && a.Weight == b.Weight &&
		a.Health == b.Health && a.Cluster == b.Cluster && a.ServiceAccount == b.ServiceAccount &&
		a.Source == b.Source && maps.Equal(a.Ports, b.Ports) && maps.Equal(a.Labels, b.Labels))
}

// gatewayChanges is how the network gateways changed between snapshots:
// the networks whose gateways differ, and all when every split-horizon
// assignment may change (gateways appeared or all went, or the weight
// scale changed).
func gatewayChanges(prev, next *Snapshot) (map[string]bool, bool) {
	if slices.Equal(prev.NetworkGateways, next.NetworkGateways) {
		return nil, false
	}
	if prev.MultiNetwork() != next.MultiNetwork() || prev.GatewayWeightScale() != next.GatewayWeightScale() {
		return nil, true
	}
	changed := map[string]bool{}
	count := map[NetworkGateway]int{}
	for _, gw := range prev.NetworkGateways {
		count[gw]++
	}
	for _, gw := range next.NetworkGateways {
		count[gw]--
	}
	for gw, n := range count {
		if n != 0 {
			changed[gw.Network] = true
		}
	}
	return changed, false
}
