package envoy

import (
	"slices"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// RuleChange is what a change to the DestinationRules of some hosts
// alters for one proxy (RulesChanged). Read-only once returned.
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
		before, after := prev.Snapshot().DestinationRules[h], v.Snapshot().DestinationRules[h]
		routes = routes || slices.ContainsFunc(before, hashes) || slices.ContainsFunc(after, hashes)
		listeners = listeners || ((slices.ContainsFunc(before, hasSubsets) || slices.ContainsFunc(after, hasSubsets)) &&
			!slices.EqualFunc(before, after, sameSubsets))
	}
	if v.Key().Type == proxy.Router && len(sniHosts) > 0 {
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

// hashes reports whether rule c sets a consistent hash anywhere: routes
// to its host then carry a hash policy.
func hashes(c *mesh.Config) bool {
	dr := c.DestinationRule()
	policies := []*networking.TrafficPolicy{dr.GetTrafficPolicy()}
	for _, ss := range dr.GetSubsets() {
		policies = append(policies, ss.GetTrafficPolicy())
	}
	for _, p := range policies {
		if p.GetLoadBalancer().GetConsistentHash() != nil {
			return true
		}
		for _, pl := range p.GetPortLevelSettings() {
			if pl.GetLoadBalancer().GetConsistentHash() != nil {
				return true
			}
		}
	}
	return false
}

func hasSubsets(c *mesh.Config) bool { return len(c.DestinationRule().GetSubsets()) > 0 }

// sameSubsets reports whether rules a and b resolve the same subset names
// for every proxy: same namespace, exportTo and subset names in order.
func sameSubsets(a, b *mesh.Config) bool {
	if a == b {
		return true
	}
	x, y := a.DestinationRule(), b.DestinationRule()
	return a.Object.Namespace == b.Object.Namespace && slices.Equal(x.GetExportTo(), y.GetExportTo()) &&
		slices.EqualFunc(x.GetSubsets(), y.GetSubsets(), func(p, q *networking.Subset) bool { return p.GetName() == q.GetName() })
}
