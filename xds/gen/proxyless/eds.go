package proxyless

import (
	"strings"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/policy"
	"github.com/navemesh/nave/xds/mesh"
)

// loadAssignment groups the endpoints of the cluster's service that carry
// its subset labels by locality. Every locality carries a weight (grpc-go
// drops localities without one).
//
// localityLbSetting applies where it does not depend on the client:
// proxyless clients of a mesh share one set of resources (generated once
// per snapshot, see the package comment), so nave does not know a
// client's locality, network or labels here. grpc-go honours locality
// weights (weighted_target, gRFC A27) and priorities (the priority
// balancer: a priority takes traffic once every higher one has no ready
// connection, or has not connected within 10s). So:
//   - distribute applies when its first entry is from: "*" (every client
//     would pick it): locality weights as for Envoy (build.Distribute);
//   - failoverPriority applies when every entry names its value
//     ("label=value"): the same priorities for every client;
//   - failover, the proximity default, and failoverPriority or
//     distribute entries that compare with the client are reported and
//     ignored: all localities take traffic at priority 0, in proportion
//     to their weights.
//
// As for Envoy and as Istio does for proxyless clients (one EDS builder
// for both), failover needs outlierDetection in the same traffic policy;
// without it failover settings are reported and ignored.
func (g *generator) loadAssignment(oc *policy.Cluster) *endpointv3.ClusterLoadAssignment {
	eps := make([]*mesh.Endpoint, 0, len(oc.Service.Endpoints))
	for _, ep := range oc.Service.Endpoints {
		if mesh.Matches(oc.Labels, ep.Labels) {
			eps = append(eps, ep)
		}
	}
	s, on := build.LocalitySetting(oc.Policy)
	if !on || s == nil {
		return build.Assignment(oc.Name, oc.Port, eps, nil, nil)
	}
	field := oc.Field("loadBalancer") + ".localityLbSetting"
	if d := s.GetDistribute(); len(d) > 0 {
		if d[0].GetFrom() == "*" {
			cla := build.Assignment(oc.Name, oc.Port, eps, nil, nil)
			build.Distribute(cla, d[0])
			return cla
		}
		g.problems.Addf(oc.Rule.Ref(), field+".distribute", "proxyless gRPC clients share one set of endpoints per mesh, so a distribute entry must apply to every client (its first entry from: \"*\"); ignored")
	}
	return build.Assignment(oc.Name, oc.Port, eps, g.priorities(oc, s, field), nil)
}

// priorities is the client-independent part of locality failover (see
// loadAssignment), or nil for "all at priority 0".
func (g *generator) priorities(oc *policy.Cluster, s *networking.LocalityLoadBalancerSetting, field string) func(*mesh.Endpoint) uint32 {
	if len(s.GetFailover()) == 0 && len(s.GetFailoverPriority()) == 0 {
		return nil
	}
	if oc.Policy.GetOutlierDetection() == nil {
		g.problems.Addf(oc.Rule.Ref(), field, "locality failover needs outlierDetection in the same traffic policy; ignored")
		return nil
	}
	if len(s.GetFailover()) > 0 {
		g.problems.Addf(oc.Rule.Ref(), field+".failover", "proxyless gRPC clients share one set of endpoints per mesh and nave does not know a client's region there; failover is ignored")
	}
	keys := s.GetFailoverPriority()
	if len(keys) == 0 {
		return nil
	}
	labels := make([]build.PriorityLabel, len(keys))
	for i, key := range keys {
		name, value, explicit := strings.Cut(key, "=")
		if !explicit {
			g.problems.Addf(oc.Rule.Ref(), field+".failoverPriority", "proxyless gRPC clients share one set of endpoints per mesh, so every entry must name its value (%s=value); %q compares with the client: failoverPriority is ignored", name, key)
			return nil
		}
		labels[i] = build.PriorityLabel{Name: name, Value: value}
	}
	return build.LabelPriorities(labels)
}
