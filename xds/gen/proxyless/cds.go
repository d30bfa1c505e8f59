package proxyless

import (
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/policy"
	"github.com/navemesh/nave/xds/mesh"
)

// clusters adds a cluster and its endpoints for every port of svc, and for
// every subset of its DestinationRule.
func (g *generator) clusters(svc *mesh.Service) {
	g.eachCluster(svc, g.cluster)
}

// eachCluster calls fn for every port of svc, and every subset of its
// DestinationRule, with the traffic policy that applies merged as for
// Envoy (policy.Clusters); not for clusters whose TLS proxyless clients
// cannot have (tlsSupported).
func (g *generator) eachCluster(svc *mesh.Service, fn func(oc *policy.Cluster)) {
	policy.Clusters(svc, g.snap.DestinationRule(svc.Hostname, ""), func(oc *policy.Cluster) {
		if g.tlsSupported(oc) {
			fn(oc)
		}
	})
}

func (g *generator) cluster(oc *policy.Cluster) {
	c := &clusterv3.Cluster{
		Name:                 oc.Name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: build.ADSConfigSource(), ServiceName: oc.Name},
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
		TransportSocket:      g.transportSocket(oc.Policy.GetTls(), oc.Service.SubjectAltNames),
	}
	if oc.Policy.GetLoadBalancer().GetSimple() == networking.LoadBalancerSettings_LEAST_REQUEST {
		c.LbPolicy = clusterv3.Cluster_LEAST_REQUEST
	}
	g.add(typeurl.Cluster, oc.Name, c)
	g.add(typeurl.Endpoint, oc.Name, loadAssignment(oc.Name, oc.Service, oc.Port, oc.Labels))
}
