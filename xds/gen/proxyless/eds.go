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
// A proxyless client never receives an endpoint it cannot reach: one on
// another network than the client's (both known). grpc-go does not send
// the SNI an east-west gateway routes by (unless an experimental
// environment variable is set, which the hub cannot know), so it is not
// given the gateways either (docs/multi-network.md).
//
// An assignment that is the same for every client (perClient false) is
// built once per snapshot and shared (read-only from here on) while any
// generation holds it; the snapshot keeps it weakly (mesh.MemoWeak), so
// one built again later is equal. It finds no problems.
func (g *generator) loadAssignment(oc *policy.Cluster) *endpointv3.ClusterLoadAssignment {
	if !perClient(g.snap, oc) {
		k := assignmentKey{name: oc.Name, svc: oc.Service, dr: oc.Rule}
		return mesh.MemoWeak(g.snap, k, func() *endpointv3.ClusterLoadAssignment { return g.newAssignment(oc) })
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
		if !mesh.Matches(oc.Labels, ep.Labels) || !ep.Serves(oc.Port) {
			continue
		}
		if g.snap.OtherNetwork(ep, g.client.Network) {
			continue
		}
		eps = append(eps, ep)
	}
	lb := build.LocalityLBFor(oc.Policy, g.client, &g.problems, oc.LocalityField)
	return build.LocalityAssignment(oc.Name, oc.Port, eps, lb, nil)
}

// perClient reports whether the cluster's assignment may differ between
// clients: it balances by locality, its service is cluster-local, or
// some of its endpoints are on a network (a client on another one does
// not get them).
func perClient(s *mesh.Snapshot, oc *policy.Cluster) bool {
	return !build.LocalityIndependent(oc.Policy) || s.ClusterLocal(oc.Service.Hostname) || networkHosts(s)[oc.Service.Hostname]
}

// networkHosts are the services with an endpoint on a network, computed
// once per snapshot.
func networkHosts(s *mesh.Snapshot) map[string]bool {
	return s.Memo(networkHostsKey{}, func() any {
		out := map[string]bool{}
		for _, svc := range s.SortedServices() {
			for _, ep := range svc.Endpoints {
				if s.NetworkOf(ep) != "" {
					out[svc.Hostname] = true
					break
				}
			}
		}
		return out
	}).(map[string]bool)
}

type networkHostsKey struct{}
