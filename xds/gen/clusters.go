package gen

import (
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/policy"
	"github.com/navemesh/nave/xds/mesh"
)

// clusters adds a cluster and its endpoints for every port of svc, and for
// every subset of its DestinationRule.
func (g *grpcGen) clusters(svc *mesh.Service) {
	g.eachCluster(svc, g.cluster)
}

// eachCluster calls fn for every port of svc, and every subset of its
// DestinationRule, with the traffic policy that applies merged as for
// Envoy (TrafficPolicyFor: the subset's settings over the rule's, a
// port-level setting over its policy's own); not for clusters whose TLS
// proxyless clients cannot have (grpcTLSSupported).
func (g *grpcGen) eachCluster(svc *mesh.Service, fn func(oc *outboundCluster)) {
	dr := g.snap.DestinationRule(svc.Hostname, "")
	spec := dr.DestinationRule()
	each := func(oc *outboundCluster) {
		if g.grpcTLSSupported(oc) {
			fn(oc)
		}
	}
	for _, p := range svc.Ports {
		each(&outboundCluster{name: build.ClusterName(svc.Hostname, p.Number, ""), svc: svc, port: p, dr: dr,
			policy: policy.TrafficPolicyFor(spec, p.Number, "")})
		for _, ss := range spec.GetSubsets() {
			each(&outboundCluster{name: build.ClusterName(svc.Hostname, p.Number, ss.GetName()), svc: svc, port: p, subset: ss.GetName(),
				labels: ss.GetLabels(), dr: dr, policy: policy.TrafficPolicyFor(spec, p.Number, ss.GetName())})
		}
	}
}

func (g *grpcGen) cluster(oc *outboundCluster) {
	c := &clusterv3.Cluster{
		Name:                 oc.name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: build.ADSConfigSource(), ServiceName: oc.name},
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
		TransportSocket:      g.grpcTransportSocket(oc.policy.GetTls()),
	}
	if oc.policy.GetLoadBalancer().GetSimple() == networking.LoadBalancerSettings_LEAST_REQUEST {
		c.LbPolicy = clusterv3.Cluster_LEAST_REQUEST
	}
	g.add(typeurl.Cluster, oc.name, c)
	g.add(typeurl.Endpoint, oc.name, loadAssignment(oc.name, oc.svc, oc.port, oc.labels))
}

// loadAssignment groups the endpoints of svc that match labels by
// locality. Every locality carries a weight (grpc-go drops localities
// without one).
func loadAssignment(name string, svc *mesh.Service, p mesh.Port, labels map[string]string) *endpointv3.ClusterLoadAssignment {
	eps := make([]*mesh.Endpoint, 0, len(svc.Endpoints))
	for _, ep := range svc.Endpoints {
		if mesh.Matches(labels, ep.Labels) {
			eps = append(eps, ep)
		}
	}
	return build.Assignment(name, p, eps, nil, nil)
}
