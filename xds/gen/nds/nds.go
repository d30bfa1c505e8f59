// Package nds generates the name table a pod's nave-agent answers DNS
// from (Istio's NDS resource, shared/nds/v1; docs/dns.md): every host the
// proxy may reach, as its listeners see them, with the addresses it
// reaches them at. It is Istio's BuildNameTable over nave's snapshot.
//
// Generate is a pure function of its View (docs/design.md invariant 6):
// safe to call from any number of goroutines on distinct Views.
package nds

import (
	"net/netip"
	"slices"
	"strings"

	ndsv1 "github.com/navemesh/nave/shared/nds/v1"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// ResourceName names the one NameTable resource (the agent must not
// depend on it: Istio's is unnamed).
const ResourceName = "name-table"

// Registries of a table entry (Istio's provider IDs).
const (
	RegistryKubernetes = "Kubernetes"
	RegistryExternal   = "External"
)

// Generate returns the name table of the proxy v scopes to, and the
// problems met: a ServiceEntry's addresses for a host that is a
// Kubernetes Service are refused (the entry keeps the Service's), never
// dropped silently. A proxyless key gets an empty table: no proxy of its
// pod carries traffic to an auto-allocated or another cluster's address
// (decision 045).
func Generate(v *scope.View) (*ndsv1.NameTable, []mesh.Problem) {
	out := &ndsv1.NameTable{Table: map[string]*ndsv1.NameTable_NameInfo{}}
	k := v.Key()
	if k.Type == proxy.GRPC {
		return out, nil
	}
	s := v.Snapshot()
	var problems build.Problems
	for _, svc := range v.Services() {
		var info *ndsv1.NameTable_NameInfo
		if svc.ClusterAddresses != nil {
			info = kubernetesEntry(v, svc, &problems)
		} else {
			info = externalEntry(v, svc)
		}
		if info == nil {
			continue
		}
		out.Table[svc.Hostname] = info
		if d, ok := s.ServiceSuffix(svc); ok && info.Registry == RegistryKubernetes {
			// The agent answers name, name.ns and name.ns.svc from these.
			info.Namespace = svc.Namespace
			info.Shortname = strings.TrimSuffix(svc.Hostname, "."+svc.Namespace+".svc."+d)
		}
	}
	return out, problems.List()
}

// kubernetesEntry is a Kubernetes Service's entry: its cluster IPs in the
// proxy's cluster when it exists there, else in the first other cluster
// (by name) that gives it one (Istio's ClusterVIPs, then the default
// address); a headless Service's ready endpoints on the proxy's network,
// of every cluster (Istio's multi-cluster headless default). A
// cluster-local host of another cluster only is left out.
func kubernetesEntry(v *scope.View, svc *mesh.Service, problems *build.Problems) *ndsv1.NameTable_NameInfo {
	k := v.Key()
	own, inOwn := svc.ClusterAddresses[k.Cluster]
	if !inOwn && k.Cluster != "" && v.Snapshot().ClusterLocal(svc.Hostname) {
		return nil
	}
	addrs := own
	if !inOwn {
		first := ""
		for c, list := range svc.ClusterAddresses {
			if len(list) > 0 && (first == "" || c < first) {
				first, addrs = c, list
			}
		}
	}
	refuseEntryAddresses(v, svc, problems)
	ips := ipsOf(addrs)
	if len(addrs) == 0 && svc.Resolution != mesh.ResolutionDNS && svc.Resolution != mesh.ResolutionDNSRoundRb {
		ips = endpointIPs(v, svc)
	}
	if len(ips) == 0 {
		return nil
	}
	return &ndsv1.NameTable_NameInfo{Ips: ips, Registry: RegistryKubernetes}
}

// refuseEntryAddresses reports the addresses ServiceEntries give a host
// that is a Kubernetes Service: the name resolves to the Service's (as
// Istio gives the Kubernetes registry precedence), so a pod's own
// cluster's name is never shadowed.
func refuseEntryAddresses(v *scope.View, svc *mesh.Service, problems *build.Problems) {
	var extra []string
	for _, a := range svc.Addresses {
		registry := false
		for _, list := range svc.ClusterAddresses {
			registry = registry || slices.Contains(list, a)
		}
		if !registry {
			extra = append(extra, a)
		}
	}
	if len(extra) == 0 {
		return
	}
	where := "another cluster of the mesh"
	if _, ok := svc.ClusterAddresses[v.Key().Cluster]; ok {
		where = "the proxy's cluster " + v.Key().Cluster
	}
	for _, src := range svc.Sources {
		if strings.Contains(src, ":ServiceEntry ") {
			problems.Addf(src, "spec.addresses", "host %s is a Kubernetes Service of %s: the DNS name table resolves it to the Service's addresses, not %s",
				svc.Hostname, where, strings.Join(extra, ", "))
		}
	}
}

// externalEntry is a ServiceEntry host's entry: its addresses, else its
// auto-allocated ones for a proxy that captures DNS, else, for
// resolution NONE, its ready endpoints on the proxy's network; none
// when it has none of these (Istio leaves it to the upstream resolver).
func externalEntry(v *scope.View, svc *mesh.Service) *ndsv1.NameTable_NameInfo {
	ips := ipsOf(v.Addresses(svc))
	if len(ips) == 0 && svc.Resolution == mesh.ResolutionNone {
		ips = endpointIPs(v, svc)
	}
	if len(ips) == 0 {
		return nil
	}
	return &ndsv1.NameTable_NameInfo{Ips: ips, Registry: RegistryExternal}
}

// ipsOf keeps the addresses that are IPs (a CIDR address of a
// ServiceEntry names no host).
func ipsOf(addrs []string) []string {
	var out []string
	for _, a := range addrs {
		if ip, err := netip.ParseAddr(a); err == nil {
			out = append(out, ip.String())
		}
	}
	return out
}

// endpointIPs are a headless host's answers: the IPs of its healthy
// endpoints on the proxy's network (either network empty: the same), as
// Kubernetes DNS answers for a headless Service, without repeats.
func endpointIPs(v *scope.View, svc *mesh.Service) []string {
	network := v.Key().Network
	var out []string
	seen := map[string]bool{}
	for _, ep := range svc.Endpoints {
		if ep.Health != mesh.Healthy || seen[ep.Address] || (network != "" && ep.Network != "" && ep.Network != network) {
			continue
		}
		if ip, err := netip.ParseAddr(ep.Address); err == nil {
			seen[ep.Address] = true
			out = append(out, ip.String())
		}
	}
	return out
}
