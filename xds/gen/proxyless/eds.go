package proxyless

import (
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/mesh"
)

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
