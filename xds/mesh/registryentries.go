package mesh

import (
	"net/netip"

	networking "istio.io/api/networking/v1alpha3"

	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
)

// Kubernetes Services that select WorkloadEntries.
//
// A registry Service's selector picks its cluster's pods (Workloads) and,
// as Istio's Kubernetes registry does (PILOT_ENABLE_K8S_SELECT_WORKLOAD_ENTRIES,
// on by default), the WorkloadEntries of the service's namespace: how VMs
// and other workloads that are not pods sit behind a Kubernetes Service.
// Istio hands each cluster's registry the WorkloadEntries of that cluster
// only (the config cluster's registry those of its config store, a remote
// cluster's those read from its own API server), so a registry Service
// selects the entries its own cluster pushed; where several clusters
// define the service, each selects its own and the merged service holds
// them all. The selection reuses the ServiceEntries' select index, and a
// WorkloadEntry change updates the selecting services incrementally like
// a ServiceEntry's (incremental.go).

// entrySelector returns the labels with which registry Service rs
// selects WorkloadEntries: its selector, or nil when it selects none. A
// headless service (no cluster IP) and an ExternalName one select none:
// Istio selects entries only for services it load balances on the
// client side.
func entrySelector(rs *meshconfigv1.Service) map[string]string {
	if len(rs.GetAddresses()) == 0 || rs.GetExternalName() != "" {
		return nil
	}
	return rs.GetSelector()
}

// registrySelectable reports whether registry Service c may select
// WorkloadEntry wc once the labels match: an entry of c's own cluster
// (namespaces are checked by the caller), with an IP address. Istio leaves
// entries addressed by a host name or a Unix socket to ServiceEntries.
func registrySelectable(c, wc *Config) bool {
	if wc.Cluster != c.Cluster {
		return false
	}
	we, _ := wc.Object.Spec.(*networking.WorkloadEntry)
	_, err := netip.ParseAddr(we.GetAddress())
	return err == nil
}

// registryEntryEndpoint returns the endpoint of a WorkloadEntry (ep, as
// converted for ServiceEntries) behind registry Service rs, with the
// ports Istio's Kubernetes registry gives it. A service port whose target
// port is a number (or unset) is served on the entry's port of the service
// port's name, else on the target port (else the port's own number):
// what Endpoint.PortFor does with the entry's ports, so ep itself serves.
// A service port whose target port is a name is served on the entry's port
// of that name, and not at all when the entry has none: then the endpoint
// is a copy whose ports map the service's port names.
func registryEntryEndpoint(rs *meshconfigv1.Service, ep *Endpoint) *Endpoint {
	named := false
	for _, p := range rs.GetPorts() {
		named = named || p.GetTargetPortName() != ""
	}
	if !named {
		return ep
	}
	ports := make(map[string]uint32, len(rs.GetPorts()))
	for _, p := range rs.GetPorts() {
		if name := p.GetTargetPortName(); name != "" {
			ports[p.GetName()] = ep.Ports[name] // 0: not served
		} else if n := ep.Ports[p.GetName()]; n != 0 {
			ports[p.GetName()] = n
		}
	}
	c := *ep
	c.Ports = ports
	return &c
}
