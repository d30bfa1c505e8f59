// Package proxyless generates the xDS resources of proxyless gRPC: for
// clients (grpc-go's xDS resolver), one api_listener per service
// host:port (lds.go), a route configuration per listener built from the
// host's VirtualService (rds.go, through the routes room), a cluster per
// service port and DestinationRule subset (cds.go; mesh mTLS for
// ISTIO_MUTUAL, cds_tls.go) — the same for every client of a mesh, so
// generated once per snapshot — and an EDS assignment per cluster
// (eds.go), the same for every client too unless the cluster's
// DestinationRule balances by locality: those depend on what ClientReads
// says of the client (its locality, network, some labels), and
// ClientEndpoints generates them for one client; and for xDS-enabled gRPC
// servers, the server listener of each port the workload serves
// (lds_server.go), per workload.
//
// Generation is a pure function of its arguments (invariant 6), safe to
// call from any number of goroutines.
package proxyless

import (
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/policy"
	"github.com/navemesh/nave/xds/gen/routes"
	"github.com/navemesh/nave/xds/mesh"
)

// ListenerName is the name grpc-go asks for when dialing xds:///host:port.
func ListenerName(host string, port uint32) string {
	return host + ":" + strconv.FormatUint(uint64(port), 10)
}

// Generate generates the proxyless gRPC resources of a snapshot for
// client c (the zero Client for one whose locality, network and labels
// are unknown).
func Generate(s *mesh.Snapshot, c build.Client) *build.Output {
	g := &generator{snap: s, client: c, out: &build.Output{Resources: map[string][]build.Resource{}}}
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

// Endpoints generates the proxyless endpoints (cluster load
// assignments, every port and subset) of hosts only for client c, sorted
// by name: all that changes for proxyless clients when only those hosts'
// endpoints changed (their listeners, routes and clusters do not read
// endpoints).
func Endpoints(s *mesh.Snapshot, hosts map[string]bool, c build.Client) []build.Resource {
	g := &generator{snap: s, client: c, out: &build.Output{Resources: map[string][]build.Resource{}}}
	for host := range hosts {
		if svc := s.Services[host]; svc != nil {
			g.eachCluster(svc, func(oc *policy.Cluster) {
				g.add(typeurl.Endpoint, oc.Name, g.loadAssignment(oc))
			})
		}
	}
	rs := g.out.Resources[typeurl.Endpoint]
	build.SortByName(rs)
	return rs
}

// RulesChanged generates what a change to the DestinationRules of hosts
// alters in Generate's output for the zero Client, given prev, the
// snapshot before the change, where every other input was the same
// (mesh.Diff.Rules) but VirtualServices when routes is true: the hosts'
// clusters and assignments (sorted by name), the names their clusters had
// before (gone: each removed unless generated anew), and whole the route
// configurations when routes is true or the rules reach them
// (policy.RuleChangeReaches: consistent hashes, subset names); listeners
// read neither rules nor VirtualServices.
func RulesChanged(prev, s *mesh.Snapshot, hosts map[string]bool, routes bool) (out *build.Output, gone []string) {
	g := &generator{snap: s, out: &build.Output{Resources: map[string][]build.Resource{typeurl.Cluster: nil, typeurl.Endpoint: nil}}}
	before := &generator{snap: prev}
	for host := range hosts {
		if svc := prev.Services[host]; svc != nil {
			before.eachCluster(svc, func(oc *policy.Cluster) { gone = append(gone, oc.Name) })
		}
		if svc := s.Services[host]; svc != nil {
			g.clusters(svc) // and their assignments
		}
		hashes, subsets := policy.RuleChangeReaches(prev.DestinationRules[host], s.DestinationRules[host])
		routes = routes || hashes || subsets
	}
	if routes {
		g.out.Resources[typeurl.Route] = []build.Resource{}
		for _, host := range s.Hostnames() {
			svc := s.Services[host]
			for _, p := range svc.Ports {
				name := ListenerName(host, p.Number)
				g.add(typeurl.Route, name, g.routeConfig(svc, p, name))
			}
		}
	}
	for _, rs := range g.out.Resources {
		build.SortByName(rs)
	}
	g.out.Problems = g.problems.List()
	return g.out, gone
}

// ClientEndpoints generates, for client c, the assignments of every
// cluster that may differ from the zero Client's (perClient: locality
// load balancing, cluster-local, endpoints on networks), sorted by name, and the problems they met: with the
// rest of Generate's output for any client, what Generate gives c.
func ClientEndpoints(s *mesh.Snapshot, c build.Client) *build.Output {
	g := &generator{snap: s, client: c, out: &build.Output{Resources: map[string][]build.Resource{}}}
	for _, host := range s.Hostnames() {
		g.eachCluster(s.Services[host], func(oc *policy.Cluster) {
			if perClient(s, oc) {
				g.add(typeurl.Endpoint, oc.Name, g.newAssignment(oc))
			}
		})
	}
	build.SortByName(g.out.Resources[typeurl.Endpoint])
	g.out.Problems = g.problems.List()
	return g.out
}

// ClientReads is what the snapshot's proxyless assignments read of a
// client (build.ClientReads over every cluster's traffic policy):
// clients that agree on it receive the same assignments. Computed once
// per snapshot.
func ClientReads(s *mesh.Snapshot) build.ClientReads {
	return s.Memo(clientReadsKey{}, func() any {
		r := build.ClientReads{Cluster: s.HasClusterLocal(), Network: len(networkHosts(s)) > 0}
		g := &generator{snap: s}
		for _, host := range s.Hostnames() {
			if s.DestinationRule(host, "") == nil && s.LocalityLbSetting() == nil {
				continue // no traffic policy
			}
			g.eachCluster(s.Services[host], func(oc *policy.Cluster) { r.Add(oc.Policy) })
		}
		return r
	}).(build.ClientReads)
}

type clientReadsKey struct{}

// generator holds what one Generate or Endpoints call shares. It belongs
// to one goroutine.
type generator struct {
	snap *mesh.Snapshot
	// client is the client assignments are built for (locality load
	// balancing).
	client   build.Client
	out      *build.Output
	problems build.Problems
	routes   *routes.Translator
	// meshTLS is the ISTIO_MUTUAL transport socket of clusters without
	// their own sni or subjectAltNames (built on first use).
	meshTLS *corev3.TransportSocket
}

func (g *generator) add(typeURL, name string, m proto.Message) {
	g.out.Resources[typeURL] = append(g.out.Resources[typeURL], build.Resource{Name: name, Message: m})
}
