package envoy

import (
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/xds/gen/build"
)

// localityIndependent reports whether no locality load balancing applies
// to the cluster (build.LocalityIndependent): its assignment is then the
// same wherever the proxy is.
func localityIndependent(oc *outboundCluster) bool {
	return build.LocalityIndependent(oc.Policy)
}

// localityLB is the cluster's locality load balancing for the proxy
// (build.LocalityLBFor: distribution, or failover priorities by
// proximity, failover or failoverPriority).
func (b *edsBuilder) localityLB(oc *outboundCluster) build.LocalityLB {
	k := b.v.Key()
	c := build.Client{Locality: k.Locality, Network: k.Network, Labels: b.v.Labels(), Cluster: k.Cluster}
	return build.LocalityLBFor(oc.Policy, c, b.problems, oc.LocalityField)
}

// distribution returns the localityLbSetting.distribute entry the proxy
// takes (build.DistributionFor), or nil.
func (b *edsBuilder) distribution(oc *outboundCluster) *networking.LocalityLoadBalancerSetting_Distribute {
	return build.DistributionFor(oc.Policy, b.v.Key().Locality)
}
