package policy

import (
	"slices"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/xds/mesh"
)

// RuleChangeReaches says what a change of one host's DestinationRules,
// from before to after (mesh.Snapshot.DestinationRules of the host),
// reaches beyond the host's clusters and assignments: hashes when a rule
// sets a consistent hash anywhere (routes to the host carry hash
// policies), subsets when the subset names a proxy resolves for the host
// may differ (routes and TCP routes name subsets; a router's
// AUTO_PASSTHROUGH chains are the host's clusters).
func RuleChangeReaches(before, after []*mesh.Config) (hashes, subsets bool) {
	hashes = slices.ContainsFunc(before, setsHash) || slices.ContainsFunc(after, setsHash)
	subsets = (slices.ContainsFunc(before, hasSubsets) || slices.ContainsFunc(after, hasSubsets)) &&
		!slices.EqualFunc(before, after, sameSubsets)
	return hashes, subsets
}

// setsHash reports whether rule c sets a consistent hash anywhere.
func setsHash(c *mesh.Config) bool {
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
