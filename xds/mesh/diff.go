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
	// addresses (auto-allocated ones too), resolution, export, subject alt names, sources). Then nothing can be reused.
	Config bool
	// Telemetry is true when Telemetry objects changed (Config false):
	// they shape only listeners (access logs, tracing, stats filters),
	// so the other resources may be reused.
	Telemetry bool
	// Hosts are the services whose endpoints changed (Config false).
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
	if prev == nil || next == nil || prev.Mesh != next.Mesh || !sameConfigs(prev.AllVirtualServices, next.AllVirtualServices) ||
		!sameConfigs(prev.Gateways, next.Gateways) || !sameConfigs(prev.Sidecars, next.Sidecars) ||
		!sameConfigs(prev.PeerAuthentications, next.PeerAuthentications) ||
		!sameConfigs(prev.RequestAuthentications, next.RequestAuthentications) ||
		!sameConfigs(prev.AuthorizationPolicies, next.AuthorizationPolicies) ||
		!sameConfigs(prev.EnvoyFilters, next.EnvoyFilters) || prev.TrustDomain != next.TrustDomain ||
		!sameMeshConfig(prev.MeshConfig, next.MeshConfig) || !sameMeshNetworks(prev.MeshNetworks, next.MeshNetworks) || !maps.Equal(prev.DomainSuffixes, next.DomainSuffixes) ||
		!sameConfigMap(prev.VirtualServices, next.VirtualServices) || !sameConfigMap(prev.DestinationRules, next.DestinationRules) ||
		len(prev.Services) != len(next.Services) {
		d.Config = true
		return d
	}
	d.Telemetry = !sameConfigs(prev.Telemetries, next.Telemetries)
	for host, n := range next.Services {
		p, ok := prev.Services[host]
		if !ok || !sameShape(p, n) {
			d.Config = true
			return d
		}
		if p == n || slices.EqualFunc(p.Endpoints, n.Endpoints, sameEndpoint) {
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

// sameShape compares everything of a service but its endpoints.
func sameShape(a, b *Service) bool {
	return a == b || (a.Hostname == b.Hostname && a.Namespace == b.Namespace && a.External == b.External &&
		a.Resolution == b.Resolution && slices.Equal(a.Ports, b.Ports) && slices.Equal(a.Addresses, b.Addresses) &&
		slices.Equal(a.AutoAddresses, b.AutoAddresses) && maps.EqualFunc(a.ClusterAddresses, b.ClusterAddresses, slices.Equal[[]string]) &&
		slices.Equal(a.ExportTo, b.ExportTo) && slices.Equal(a.SubjectAltNames, b.SubjectAltNames) && slices.Equal(a.Sources, b.Sources))
}

func sameEndpoint(a, b *Endpoint) bool {
	return a == b || (a.Address == b.Address && a.Locality == b.Locality && a.Network == b.Network && a.Weight == b.Weight &&
		a.Health == b.Health && a.Cluster == b.Cluster && a.Stale == b.Stale && a.ServiceAccount == b.ServiceAccount &&
		a.Source == b.Source && maps.Equal(a.Ports, b.Ports) && maps.Equal(a.Labels, b.Labels))
}
