// Package gen turns a mesh snapshot into xDS resources: it is the façade
// the push engine (xds/cache) calls, and the generators live in rooms
// below it, each importing only the rooms under it:
//
//	build      what every room builds with: Output, Resource, Problems,
//	           the names shared between rooms, message forms both
//	           flavours use (Any, ADS source, socket address, assignments)
//	policy     what Istio's policy resources mean: PeerAuthentication
//	           modes, AuthorizationPolicy → RBAC, RequestAuthentication →
//	           jwt_authn, DestinationRule traffic policy per cluster
//	scope      the View: one proxy's scoped read model of a snapshot, and
//	           the label and IP signatures caches key on
//	routes     VirtualService → Envoy routes, for Envoy and proxyless gRPC
//	envoy      Envoy sidecars and gateways, one generator per type URL
//	           (cds*.go, eds*.go, lds*.go, rds*.go)
//	sim        walks generated config as Envoy would, for tests
//
// Proxyless gRPC generation (GRPC, GRPCEndpoints, GRPCServerListeners)
// is still here, in gen itself.
//
//	gentest    what the rooms' tests share
//
// Generators are pure functions of their explicit input (DESIGN.md
// invariant 6): they read only the snapshot and key they are given and
// return new messages (or messages memoized per snapshot, read-only), so
// they are safe to call from any number of goroutines.
package gen

import (
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/envoy"
	"github.com/navemesh/nave/xds/gen/policy"
	"github.com/navemesh/nave/xds/gen/routes"
	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
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

// Envoy generates every resource for an Envoy proxy with the given key
// (sidecar or router). It is a pure function of (snapshot, key).
func Envoy(s *mesh.Snapshot, key proxy.Key) *Output {
	return envoy.Generate(scope.New(s, key), Types...)
}

// EnvoyEndpointsChanged generates for key what a change to the endpoints
// of hosts alone can alter: the assignments of those hosts' clusters (of
// those visible to key), and every resource of types, which the caller
// names among the others that read endpoints (clusters of DNS services
// hold theirs inline; the proxy's inbound ports come from the endpoints
// at its IPs). It is a pure function of its arguments.
func EnvoyEndpointsChanged(s *mesh.Snapshot, key proxy.Key, hosts map[string]bool, types ...string) *Output {
	v := scope.New(s, key)
	eds := envoy.EndpointsOf(v, hosts)
	out := envoy.Generate(v, types...)
	out.Resources[typeurl.Endpoint] = eds
	return out
}

// ListenerName is the name grpc-go asks for when dialing xds:///host:port.
func ListenerName(host string, port uint32) string {
	return host + ":" + strconv.FormatUint(uint64(port), 10)
}

// GRPC generates the proxyless gRPC resources of a snapshot.
func GRPC(s *mesh.Snapshot) *build.Output {
	g := &grpcGen{snap: s, out: &build.Output{Resources: map[string][]build.Resource{}}}
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
func GRPCEndpoints(s *mesh.Snapshot, hosts map[string]bool) []build.Resource {
	g := &grpcGen{snap: s, out: &build.Output{Resources: map[string][]build.Resource{}}}
	for host := range hosts {
		if svc := s.Services[host]; svc != nil {
			g.eachCluster(svc, func(oc *policy.Cluster) {
				g.add(typeurl.Endpoint, oc.Name, loadAssignment(oc.Name, oc.Service, oc.Port, oc.Labels))
			})
		}
	}
	rs := g.out.Resources[typeurl.Endpoint]
	build.SortByName(rs)
	return rs
}

// grpcGen holds what one GRPC or GRPCEndpoints call shares. It belongs
// to one goroutine.
type grpcGen struct {
	snap     *mesh.Snapshot
	out      *build.Output
	problems build.Problems
	routes   *routes.Translator
	// meshTLS is the ISTIO_MUTUAL transport socket of clusters without
	// their own sni or subjectAltNames (built on first use).
	meshTLS *corev3.TransportSocket
}

func (g *grpcGen) add(typeURL, name string, m proto.Message) {
	g.out.Resources[typeURL] = append(g.out.Resources[typeURL], build.Resource{Name: name, Message: m})
}
