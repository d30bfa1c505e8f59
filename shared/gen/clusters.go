package gen

import (
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/shared/mesh"
)

// clusters adds a cluster and its endpoints for every port of svc, and for
// every subset of its DestinationRule.
func (g *grpcGen) clusters(svc *mesh.Service) {
	g.eachCluster(svc, g.cluster)
}

// eachCluster calls fn for every port of svc, and every subset of its
// DestinationRule, with the traffic policy that applies.
func (g *grpcGen) eachCluster(svc *mesh.Service, fn func(svc *mesh.Service, p mesh.Port, subset string, labels map[string]string, policy *networking.TrafficPolicy)) {
	dr := g.snap.DestinationRule(svc.Hostname, "")
	for _, p := range svc.Ports {
		policy := dr.DestinationRule().GetTrafficPolicy()
		fn(svc, p, "", nil, policy)
		for _, ss := range dr.DestinationRule().GetSubsets() {
			sp := policy
			if ss.GetTrafficPolicy() != nil {
				sp = ss.GetTrafficPolicy()
			}
			fn(svc, p, ss.GetName(), ss.GetLabels(), sp)
		}
	}
}

func (g *grpcGen) cluster(svc *mesh.Service, p mesh.Port, subset string, labels map[string]string, policy *networking.TrafficPolicy) {
	name := ClusterName(svc.Hostname, p.Number, subset)
	c := &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource(), ServiceName: name},
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
	}
	if portPolicy := portTrafficPolicy(policy, p.Number); portPolicy != nil {
		policy = portPolicy
	}
	if policy.GetLoadBalancer().GetSimple() == networking.LoadBalancerSettings_LEAST_REQUEST {
		c.LbPolicy = clusterv3.Cluster_LEAST_REQUEST
	}
	g.add(ClusterType, name, c)
	g.add(EndpointType, name, loadAssignment(name, svc, p, labels))
}

// portTrafficPolicy returns the port-level settings for port, as a policy.
func portTrafficPolicy(policy *networking.TrafficPolicy, port uint32) *networking.TrafficPolicy {
	for _, pl := range policy.GetPortLevelSettings() {
		if pl.GetPort().GetNumber() == port {
			return &networking.TrafficPolicy{LoadBalancer: pl.GetLoadBalancer()}
		}
	}
	return nil
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
	return buildAssignment(name, p, eps, nil, nil)
}

func socketAddress(addr string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address:       addr,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}

func healthStatus(h mesh.Health) corev3.HealthStatus {
	switch h {
	case mesh.Unhealthy:
		return corev3.HealthStatus_UNHEALTHY
	case mesh.Terminating:
		return corev3.HealthStatus_DRAINING
	default:
		return corev3.HealthStatus_HEALTHY
	}
}
