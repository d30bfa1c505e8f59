// Package gen turns a mesh snapshot into xDS resources. Generators are pure
// functions of their explicit input (DESIGN.md invariant 6): they read only
// the snapshot they are given and return new messages, so they are safe to
// call from any number of goroutines.
//
// GRPC generates for proxyless gRPC clients (grpc-go's xDS resolver):
// one api_listener per service host:port, a route configuration per
// listener built from the host's VirtualService, a cluster per service port
// and DestinationRule subset (with mesh mTLS for ISTIO_MUTUAL; see
// grpcTLSSupported), and an EDS assignment per cluster.
package gen

import (
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/routes"
	"github.com/navemesh/nave/xds/mesh"
)

// Types lists the xDS types in the order a server should send them
// (clusters before listeners, so that what a listener names exists).
var Types = []string{typeurl.Cluster, typeurl.Endpoint, typeurl.Listener, typeurl.Route}

// Resource is one named xDS resource (defined in build, where the rooms
// that generate it can reach it).
type Resource = build.Resource

// Output is everything generated for one proxy or snapshot (defined in
// build, where the rooms that generate it can reach it).
type Output = build.Output

// ListenerName is the name grpc-go asks for when dialing xds:///host:port.
func ListenerName(host string, port uint32) string {
	return host + ":" + strconv.FormatUint(uint64(port), 10)
}

// GRPC generates the proxyless gRPC resources of a snapshot.
func GRPC(s *mesh.Snapshot) *Output {
	g := &grpcGen{snap: s, out: &Output{Resources: map[string][]Resource{}}}
	for _, host := range s.Hostnames() {
		svc := s.Services[host]
		g.clusters(svc)
		for _, p := range svc.Ports {
			name := ListenerName(host, p.Number)
			g.add(typeurl.Listener, name, apiListener(name))
			g.add(typeurl.Route, name, g.routeConfig(svc, p, name))
		}
	}
	for _, rs := range g.out.Resources {
		build.SortByName(rs)
	}
	g.out.Problems = g.problems.List()
	return g.out
}

// GRPCEndpoints generates the proxyless endpoints (cluster load
// assignments, every port and subset) of hosts only, sorted by name: all
// that changes for proxyless clients when only those hosts' endpoints
// changed (their listeners, routes and clusters do not read endpoints).
func GRPCEndpoints(s *mesh.Snapshot, hosts map[string]bool) []Resource {
	g := &grpcGen{snap: s, out: &Output{Resources: map[string][]Resource{}}}
	for host := range hosts {
		if svc := s.Services[host]; svc != nil {
			g.eachCluster(svc, func(oc *outboundCluster) {
				g.add(typeurl.Endpoint, oc.name, loadAssignment(oc.name, oc.svc, oc.port, oc.labels))
			})
		}
	}
	rs := g.out.Resources[typeurl.Endpoint]
	build.SortByName(rs)
	return rs
}

type grpcGen struct {
	snap     *mesh.Snapshot
	out      *Output
	problems build.Problems
	routes   *routes.Translator
	// meshTLS is the ISTIO_MUTUAL transport socket of clusters without
	// their own sni or subjectAltNames (built on first use).
	meshTLS *corev3.TransportSocket
}

func (g *grpcGen) add(typeURL, name string, m proto.Message) {
	g.out.Resources[typeURL] = append(g.out.Resources[typeURL], Resource{Name: name, Message: m})
}
