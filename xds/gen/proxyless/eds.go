package proxyless

import (
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/policy"
	"github.com/navemesh/nave/xds/mesh"
)

// loadAssignment groups the endpoints of the cluster's service that carry
// its subset labels (and serve its port) by locality, with the locality load balancing the
// generator's client gets (build.LocalityLBFor, exactly as for Envoy and
// as Istio builds a proxyless client's EDS). grpc-go honours locality
// weights (weighted_target, gRFC A27) and priorities (the priority
// balancer: a priority takes traffic once every higher one has no ready
// connection, or has not connected within 10s). Every locality carries a
// weight (grpc-go drops localities without one).
//
// An assignment whose cluster has no locality load balancing
// (build.LocalityIndependent) is the same for every client: it is built
// once per snapshot and shared (read-only from here on); it finds no
// problems.
func (g *generator) loadAssignment(oc *policy.Cluster) *endpointv3.ClusterLoadAssignment {
	if build.LocalityIndependent(oc.Policy) && !g.snap.ClusterLocal(oc.Service.Hostname) {
		k := assignmentKey{name: oc.Name, svc: oc.Service, dr: oc.Rule}
		return g.snap.Memo(k, func() any { return g.newAssignment(oc) }).(*endpointv3.ClusterLoadAssignment)
	}
	return g.newAssignment(oc)
}

// assignmentKey is everything a proxyless assignment without locality
// load balancing reads.
type assignmentKey struct {
	name string
	svc  *mesh.Service
	dr   *mesh.Config
}

func (g *generator) newAssignment(oc *policy.Cluster) *endpointv3.ClusterLoadAssignment {
	eps := make([]*mesh.Endpoint, 0, len(oc.Service.Endpoints))
	for _, ep := range build.ClusterLocalEndpoints(g.snap, oc.Service.Hostname, g.client.Cluster, oc.Service.Endpoints) {
		if mesh.Matches(oc.Labels, ep.Labels) && ep.Serves(oc.Port) {
			eps = append(eps, ep)
		}
	}
	lb := build.LocalityLBFor(oc.Policy, g.client, &g.problems, oc.LocalityField)
	return build.LocalityAssignment(oc.Name, oc.Port, eps, lb, nil)
}
