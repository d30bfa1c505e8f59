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
//	patch      EnvoyFilters, applied to what envoy generated for a proxy
//	nds        the name table a pod's agent answers DNS from (Istio's NDS)
//	proxyless  proxyless gRPC clients (per snapshot; locality-balanced
//	           assignments per client) and xDS servers
//	sim        walks generated config as Envoy would, for tests
//	gentest    what the rooms' tests share
//
// Generators are pure functions of their explicit input (docs/design.md
// invariant 6): they read only the snapshot and key they are given and
// return new messages (or messages memoized per snapshot, read-only), so
// they are safe to call from any number of goroutines.
package gen

import (
	"slices"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/envoy"
	"github.com/navemesh/nave/xds/gen/nds"
	"github.com/navemesh/nave/xds/gen/patch"
	"github.com/navemesh/nave/xds/gen/proxyless"
	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// Types lists the xDS types in the order a server should send them
// (clusters before listeners, so that what a listener names exists).
var Types = []string{typeurl.Cluster, typeurl.Endpoint, typeurl.Listener, typeurl.Route}

// Resource is one named xDS resource, a plain value whose Message is
// read-only once generated (defined in build, where the rooms that
// generate it can reach it).
type Resource = build.Resource

// Output is everything generated for one proxy or snapshot, read-only
// once returned and then safe to read from any number of goroutines
// (defined in build, where the rooms that generate it can reach it).
type Output = build.Output

// Envoy generates every resource for an Envoy proxy with the given key
// (sidecar or router). It is a pure function of (snapshot, key).
func Envoy(s *mesh.Snapshot, key proxy.Key) *Output {
	return envoy.Generate(scope.New(s, key), Types...)
}

// NameTable generates the name table of the proxy with key k (Istio's
// NDS): one resource of typeurl.NameTable, with the problems met. It is a
// pure function of (snapshot, key).
func NameTable(s *mesh.Snapshot, key proxy.Key) *Output {
	nt, problems := nds.Generate(scope.New(s, key))
	return &Output{Resources: map[string][]Resource{typeurl.NameTable: {{Name: nds.ResourceName, Message: nt}}}, Problems: problems}
}

// EnvoyReadsVersion reports whether Envoy generation for the snapshot
// reads a proxy's version (an EnvoyFilter matches proxyVersion): if not,
// proxies that differ only in version get the same config.
func EnvoyReadsVersion(s *mesh.Snapshot) bool { return patch.UsesVersion(s) }

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

// RoutingOutput is what EnvoyRoutingChanged and GRPCRoutingChanged
// generate: Resources holds whole the types listed in Whole, and of the
// others (clusters, endpoints) only the resources that changed; Gone are
// the names of clusters and assignments to remove (unless generated
// anew). Read-only once returned, and then safe to read from any number
// of goroutines.
type RoutingOutput struct {
	*Output
	Whole []string
	Gone  []string
}

// EnvoyRoutingChanged generates for key what changed since prev, when the
// snapshots differ only in the DestinationRules and VirtualServices diff
// names (its Rules and Routes) and the endpoints of diff.Hosts: the
// clusters and assignments of the rules' hosts (envoy.RulesChanged), the
// assignments of the other hosts, and whole every resource of types
// (named by the caller, as for EnvoyEndpointsChanged) and of the types
// that read the changed rules or VirtualServices for this proxy
// (envoy.RulesChanged, envoy.RoutesChanged). Nil when an EnvoyFilter
// applies to the proxy (a patch may match or add clusters): generate from
// scratch then. It is a pure function of its arguments.
func EnvoyRoutingChanged(prev, s *mesh.Snapshot, key proxy.Key, diff mesh.Diff, types ...string) *RoutingOutput {
	v := scope.New(s, key)
	if patch.For(s, key, v.Labels(), v.Problems()) != nil {
		return nil
	}
	ch := envoy.RulesChanged(scope.New(prev, key), v, diff.Rules)
	whole := map[string]bool{}
	for _, t := range slices.Concat(types, ch.Types, envoy.RoutesChanged(v, diff.Routes)) {
		whole[t] = true
	}
	out := &RoutingOutput{Gone: ch.Gone}
	for _, t := range Types {
		if whole[t] {
			out.Whole = append(out.Whole, t)
		}
	}
	out.Output = envoy.Generate(v, out.Whole...)
	if !whole[typeurl.Cluster] {
		out.Resources[typeurl.Cluster] = ch.Clusters
	}
	out.Resources[typeurl.Endpoint] = append(ch.Endpoints, envoy.EndpointsOf(v, others(diff.Hosts, diff.Rules))...)
	out.Problems = v.Problems().List()
	return out
}

// GRPCClient is what proxyless generation reads of a client: its
// locality, network and labels, for locality load balancing (defined in
// build, shared with Envoy's).
type GRPCClient = build.Client

// ClientReads says which of a client's attributes generated assignments
// read (defined in build).
type ClientReads = build.ClientReads

// GRPC generates the resources of every proxyless gRPC client of a
// snapshot whose locality, network and labels are unknown (or not read:
// GRPCClientReads).
func GRPC(s *mesh.Snapshot) *Output { return proxyless.Generate(s, GRPCClient{}) }

// GRPCFor generates the resources of proxyless gRPC client c: GRPC's,
// with the assignments of clusters that balance by locality built for c.
func GRPCFor(s *mesh.Snapshot, c GRPCClient) *Output { return proxyless.Generate(s, c) }

// GRPCRoutingChanged generates what changed since prev in GRPC's output,
// when the snapshots differ only in the DestinationRules and
// VirtualServices diff names and the endpoints of diff.Hosts: the
// clusters and assignments of the rules' hosts, the assignments of the
// other hosts, and the route configurations whole when the rules reach
// them or VirtualServices changed (proxyless.RulesChanged).
func GRPCRoutingChanged(prev, s *mesh.Snapshot, diff mesh.Diff) *RoutingOutput {
	out, gone := proxyless.RulesChanged(prev, s, diff.Rules, len(diff.Routes) > 0)
	res := &RoutingOutput{Output: out, Gone: gone}
	if _, ok := out.Resources[typeurl.Route]; ok {
		res.Whole = []string{typeurl.Route}
	}
	if others := others(diff.Hosts, diff.Rules); len(others) > 0 {
		out.Resources[typeurl.Endpoint] = append(out.Resources[typeurl.Endpoint], proxyless.Endpoints(s, others, GRPCClient{})...)
	}
	return res
}

// others are the hosts not among rules (whose assignments are made with
// their clusters).
func others(hosts, rules map[string]bool) map[string]bool {
	out := map[string]bool{}
	for h := range hosts {
		if !rules[h] {
			out[h] = true
		}
	}
	return out
}

// GRPCClientReads is what the snapshot's proxyless resources read of a
// client: clients that agree on it receive the same resources. Memoized
// per snapshot.
func GRPCClientReads(s *mesh.Snapshot) ClientReads { return proxyless.ClientReads(s) }

// GRPCClientEndpoints generates for c only the assignments of clusters
// that may differ between clients (locality load balancing, cluster-local
// services, endpoints on networks), sorted by name, with their problems: GRPC's
// output with these in place of its own is GRPCFor's.
func GRPCClientEndpoints(s *mesh.Snapshot, c GRPCClient) *Output {
	return proxyless.ClientEndpoints(s, c)
}

// GRPCEndpoints generates the proxyless assignments of hosts' clusters
// only, for client c, sorted by name: all that changes for proxyless
// clients when only those hosts' endpoints changed.
func GRPCEndpoints(s *mesh.Snapshot, hosts map[string]bool, c GRPCClient) []Resource {
	return proxyless.Endpoints(s, hosts, c)
}

// GRPCServerListeners generates the server listeners an xDS gRPC server
// with key k asks for, one per port its workload serves (under both
// wildcard listening addresses), sorted by name, with the problems met.
func GRPCServerListeners(s *mesh.Snapshot, k proxy.Key) ([]Resource, []mesh.Problem) {
	return proxyless.ServerListeners(s, k)
}
