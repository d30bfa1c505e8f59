package envoy

import (
	"slices"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/policy"
	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// RuleChange is what a change to the DestinationRules of some hosts
// alters for one proxy (RulesChanged). Read-only once returned, and then
// safe to read from any number of goroutines.
type RuleChange struct {
	// Clusters and Endpoints are the hosts' outbound clusters (with their
	// SNI-DNAT twins) and EDS assignments, generated anew, sorted by name.
	Clusters, Endpoints []build.Resource
	// Gone are the names the hosts' clusters had before the change: each
	// is removed from both types unless generated anew (a subset removed,
	// a cluster no longer EDS: PASSTHROUGH load balancing).
	Gone []string
	// Types are the other types that read the changed rules for this
	// proxy and must be generated whole: routes when a rule sets a
	// consistent hash (route hash policies), routes and listeners when the
	// subsets a proxy resolves may differ (routes and TCP routes name
	// subsets; a router's AUTO_PASSTHROUGH chains are its clusters').
	Types []string
}

// RulesChanged generates for the proxy v scopes what a change to the
// DestinationRules of hosts can alter, given prev, a View of the same key
// on the snapshot before the change, where every other input was the same
// (mesh.Diff.Rules). The clusters of other hosts are unchanged: a rule is
// looked up only under the host it names (mesh.Snapshot.DestinationRule),
// and cluster generation reads no other host's rule. EnvoyFilters are not
// applied: the caller generates from scratch when any applies to the
// proxy (a patch may match these clusters, or add some).
func RulesChanged(prev, v *scope.View, hosts map[string]bool) *RuleChange {
	out := &RuleChange{}
	b := newCDSBuilder(v)
	sniHosts, prevSNIHosts := routerAutoPassthroughHosts(v), routerAutoPassthroughHosts(prev)
	var routes, listeners bool
	for h := range hosts {
		if svc := v.Service(h); svc != nil {
			serviceClusters(v, svc, sniHosts, func(oc *outboundCluster) {
				out.Clusters = append(out.Clusters, build.Resource{Name: oc.Name, Message: b.outbound(oc)})
				if oc.kind == kindEDS {
					out.Endpoints = append(out.Endpoints, build.Resource{Name: oc.Name, Message: b.assignments.assignment(oc)})
				}
			})
		}
		if svc := prev.Service(h); svc != nil {
			serviceClusters(prev, svc, prevSNIHosts, func(oc *outboundCluster) {
				out.Gone = append(out.Gone, oc.Name)
			})
		}
		hashes, subsets := policy.RuleChangeReaches(prev.Snapshot().DestinationRules[h], v.Snapshot().DestinationRules[h])
		routes, listeners = routes || hashes, listeners || subsets
	}
	if v.Key().Type == proxy.Router && len(sniHosts) > 0 && len(hosts) > 0 {
		listeners = true // AUTO_PASSTHROUGH chains are the clusters'
	}
	if listeners {
		out.Types = append(out.Types, typeurl.Listener, typeurl.Route)
	} else if routes {
		out.Types = append(out.Types, typeurl.Route)
	}
	build.SortByName(out.Clusters)
	build.SortByName(out.Endpoints)
	slices.Sort(out.Gone)
	return out
}

// RoutesChanged returns the types that read the VirtualServices changed
// (added, removed, or replaced: before and after) for the proxy v scopes:
// routes; and listeners for a router (its servers claim the hosts of the
// VirtualServices bound to them, and carry their TCP and TLS routes) or
// when one of them has TCP or TLS routes (sidecar tcp_proxy and SNI
// chains). Nil when none changed.
func RoutesChanged(v *scope.View, changed []*mesh.Config) []string {
	if len(changed) == 0 {
		return nil
	}
	if v.Key().Type == proxy.Router || slices.ContainsFunc(changed, func(c *mesh.Config) bool {
		vs := c.VirtualService()
		return len(vs.GetTcp()) > 0 || len(vs.GetTls()) > 0
	}) {
		return []string{typeurl.Listener, typeurl.Route}
	}
	return []string{typeurl.Route}
}
