// Package routes translates VirtualService HTTP routes into Envoy routes,
// for Envoy proxies (ForEnvoy: one proxy's View) and for proxyless gRPC
// clients (ForProxyless: a whole snapshot), which read the same
// route.Route messages with different semantics where the two differ.
// Route configurations, virtual hosts and listeners are the callers'.
package routes

import (
	"strconv"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/policy"
	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/mesh"
)

// Translator turns VirtualService HTTP routes into Envoy route.Routes.
// The proxyless gRPC generator and the Envoy generator share it; envoy
// selects Envoy's semantics where they differ (see the field comments).
// It records what it cannot translate as problems.
//
// A Translator belongs to one goroutine: it shares the messages it builds
// between the routes it returns (read-only once returned).
type Translator struct {
	// service returns a service the proxy may route to, or nil.
	service func(host string) *mesh.Service
	// known reports whether the mesh has the host at all (to tell
	// "unknown" from "not visible" in problems).
	known func(host string) bool
	// subset reports whether host's DestinationRule defines subset.
	subset func(host, subset string) bool
	// problem records config that cannot be applied.
	problem func(resource, field, reason string)
	// snap completes config's short host names (Snapshot.ResolveHost).
	snap *mesh.Snapshot

	// envoy: Envoy semantics. Unresolvable destinations route to
	// BlackHoleCluster, Istio's default retries and timeout 0 apply,
	// sourceLabels/sourceNamespace are evaluated against the proxy,
	// delegation, CORS, mirrors and header operations are generated.
	// Otherwise (proxyless gRPC) destinations keep their names, timeouts
	// become max_stream_duration and only set retries apply.
	envoy bool
	// labels and namespace of the proxy (envoy only).
	labels    map[string]string
	namespace string
	// hashPolicy returns the consistent-hash policy of a destination
	// cluster, or nil.
	hashPolicy func(host string, port uint32, subset string) []*routev3.RouteAction_HashPolicy
	// delegate finds a delegate VirtualService (envoy only).
	delegate func(namespace, name string) *mesh.Config

	defaultRetry, defaultHashedRetry *routev3.RetryPolicy
	prevHosts                        []*routev3.RetryPolicy_RetryHostPredicate
	zero                             *durationpb.Duration
}

// Context says where translated routes apply. It is a plain value.
type Context struct {
	// port is the port of the route configuration: matches naming another
	// port are skipped, and it is the destination port when a destination
	// names none and its service has several.
	port uint32
	// gateway reports whether an entry of a match's gateways field (as
	// written in a VirtualService of namespace vsNamespace) names the
	// context: "mesh" for sidecars, the gateway for routers.
	gateway func(vsNamespace, name string) bool
}

// ForEnvoy returns the Translator of an Envoy proxy: destinations resolve
// among the services visible to v's proxy and the DestinationRules that
// apply to it; sourceLabels and sourceNamespace match the proxy; problems
// go to v.Problems().
func ForEnvoy(v *scope.View) *Translator {
	problems := v.Problems()
	return &Translator{
		envoy:   true,
		snap:    v.Snapshot(),
		service: v.Service,
		known:   func(host string) bool { return v.Snapshot().Services[host] != nil },
		subset: func(host, subset string) bool {
			_, ok := v.Subset(host, subset)
			return ok
		},
		problem: func(resource, field, reason string) {
			problems.Add(mesh.Problem{Resource: resource, Field: field, Reason: reason})
		},
		labels:    v.Labels(),
		namespace: v.Key().Namespace,
		delegate: func(namespace, name string) *mesh.Config {
			return virtualServiceByName(v.Snapshot(), namespace, name)
		},
		hashPolicy: func(host string, port uint32, subset string) []*routev3.RouteAction_HashPolicy {
			dr := v.DestinationRule(host).DestinationRule()
			if dr == nil {
				return nil
			}
			return consistentHash(policy.TrafficPolicyFor(dr, port, subset).GetLoadBalancer().GetConsistentHash())
		},
	}
}

// ForProxyless returns the Translator of proxyless gRPC clients:
// destinations resolve among every service of s and the DestinationRules
// of their hosts; problems go to problems.
func ForProxyless(s *mesh.Snapshot, problems *build.Problems) *Translator {
	return &Translator{
		snap:    s,
		service: func(host string) *mesh.Service { return s.Services[host] },
		subset: func(host, subset string) bool {
			_, ok := s.Subset(host, subset)
			return ok
		},
		problem: func(resource, field, reason string) {
			problems.Add(mesh.Problem{Resource: resource, Field: field, Reason: reason})
		},
		hashPolicy: func(host string, port uint32, subset string) []*routev3.RouteAction_HashPolicy {
			dr := s.DestinationRule(host, "").DestinationRule()
			if dr == nil {
				return nil
			}
			return grpcConsistentHash(policy.TrafficPolicyFor(dr, port, subset).GetLoadBalancer().GetConsistentHash())
		},
	}
}

// HashPolicy returns the route hash policy of requests to the cluster of
// host, port and subset (its DestinationRule's consistentHash), or nil.
func (t *Translator) HashPolicy(host string, port uint32, subset string) []*routev3.RouteAction_HashPolicy {
	if t.hashPolicy == nil {
		return nil
	}
	return t.hashPolicy(host, port, subset)
}

// Mesh is the context of a sidecar's (or a proxyless client's) routes on
// port: a match's gateways must name "mesh".
func Mesh(port uint32) Context {
	return Context{port: port, gateway: func(_, name string) bool { return name == "mesh" }}
}

// Gateway is the context of gateway gw's routes on port: a match's
// gateways entry names gw as "namespace/name", or as "name" from a
// VirtualService in gw's namespace.
func Gateway(gw *mesh.Config, port uint32) Context {
	full := gw.Object.Namespace + "/" + gw.Object.Name
	return Context{port: port, gateway: func(vsNamespace, name string) bool {
		return name == full || (name == gw.Object.Name && vsNamespace == gw.Object.Namespace)
	}}
}

// ContextFree reports whether cfg's routes translate the same in every
// Context (any port, the mesh or any gateway): no route delegates, no
// match names a port or gateways, and every destination and mirror names
// its port or resolves to a service with exactly one port. A caller may
// then translate it once for all the contexts it serves.
func (t *Translator) ContextFree(cfg *mesh.Config) bool {
	portFree := func(d *networking.Destination) bool {
		if d.GetPort().GetNumber() != 0 {
			return true
		}
		target := t.service(t.snap.ResolveHost(d.GetHost(), cfg))
		return target != nil && len(target.Ports) == 1
	}
	for _, hr := range cfg.VirtualService().GetHttp() {
		if hr.GetDelegate() != nil {
			return false
		}
		for _, m := range hr.GetMatch() {
			if m.GetPort() != 0 || len(m.GetGateways()) > 0 {
				return false
			}
		}
		for _, d := range hr.GetRoute() {
			if !portFree(d.GetDestination()) {
				return false
			}
		}
		if m := hr.GetMirror(); m != nil && !portFree(m) {
			return false
		}
		for _, m := range hr.GetMirrors() {
			if !portFree(m.GetDestination()) {
				return false
			}
		}
	}
	return true
}

// VirtualService translates the HTTP routes of cfg for ctx.
func (t *Translator) VirtualService(cfg *mesh.Config, ctx Context) []*routev3.Route {
	return t.httpRoutes(cfg, cfg.VirtualService().GetHttp(), nil, nil, ctx)
}

// httpRoutes translates routes of cfg. parent is set for the routes of a
// delegate: the delegating route, whose applicable matches (parentMatches)
// are ANDed with each child match, and whose settings fill the child's
// unset ones.
func (t *Translator) httpRoutes(cfg *mesh.Config, hrs []*networking.HTTPRoute, parent *networking.HTTPRoute, parentMatches []*networking.HTTPMatchRequest, ctx Context) []*routev3.Route {
	var out []*routev3.Route
	catchAll := -1
	for i, hr := range hrs {
		field := httpField(i)
		if catchAll >= 0 {
			t.problem(cfg.Ref(), field, field+" is unreachable: spec.http["+strconv.Itoa(catchAll)+"] matches every request")
			continue
		}
		matches, ok := t.applicable(cfg, field, hr.GetMatch(), ctx)
		if !ok {
			continue
		}
		if parent != nil {
			if matches, ok = t.mergeMatches(cfg, field, parentMatches, matches, hr.GetMatch()); !ok {
				continue
			}
			hr = inherit(hr, parent)
		}
		if hr.GetDelegate() != nil {
			out = append(out, t.delegated(cfg, field, hr, matches, parent != nil, ctx)...)
			continue
		}
		tmpl, ok := t.route(cfg, field, hr, ctx)
		if !ok {
			continue
		}
		for k, m := range matches {
			r := tmpl // the last match's route is the template itself
			if k < len(matches)-1 {
				r = &routev3.Route{
					Name:                    tmpl.Name,
					Action:                  tmpl.Action,
					TypedPerFilterConfig:    tmpl.TypedPerFilterConfig,
					RequestHeadersToAdd:     tmpl.RequestHeadersToAdd,
					RequestHeadersToRemove:  tmpl.RequestHeadersToRemove,
					ResponseHeadersToAdd:    tmpl.ResponseHeadersToAdd,
					ResponseHeadersToRemove: tmpl.ResponseHeadersToRemove,
				}
			}
			r.Match = routeMatch(m)
			out = append(out, r)
		}
		if parent == nil && matchesAll(matches) {
			catchAll = i
		}
	}
	return out
}

// httpFields are the field paths of the first HTTP routes of a
// VirtualService: translating them builds no string that only a problem
// would need.
var httpFields = func() (out [32]string) {
	for i := range out {
		out[i] = "spec.http[" + strconv.Itoa(i) + "]"
	}
	return out
}()

// httpField is the field path of HTTP route i.
func httpField(i int) string {
	if i < len(httpFields) {
		return httpFields[i]
	}
	return "spec.http[" + strconv.Itoa(i) + "]"
}

// applicable returns the match clauses of a route that apply in ctx: a
// route without matches matches everything (one empty clause); clauses for
// another port or gateways, or whose sourceLabels / sourceNamespace do not
// select the proxy, are dropped, as are clauses with a regex RE2 refuses
// (reported). ok is false when clauses were given and none is left.
func (t *Translator) applicable(cfg *mesh.Config, field string, ms []*networking.HTTPMatchRequest, ctx Context) ([]*networking.HTTPMatchRequest, bool) {
	if len(ms) == 0 {
		return []*networking.HTTPMatchRequest{{}}, true
	}
	out := make([]*networking.HTTPMatchRequest, 0, len(ms))
	for k, m := range ms {
		if m.GetPort() != 0 && m.GetPort() != ctx.port {
			continue
		}
		if gws := m.GetGateways(); len(gws) > 0 {
			found := false
			for _, g := range gws {
				if ctx.gateway(cfg.Object.Namespace, g) {
					found = true
					break
				}
			}
			if !found {
				continue
			}
		}
		if t.envoy {
			if !mesh.Matches(m.GetSourceLabels(), t.labels) {
				continue
			}
			if ns := m.GetSourceNamespace(); ns != "" && ns != t.namespace {
				continue
			}
		}
		if f, err := badRegex(m); err != nil {
			t.problem(cfg.Ref(), field+".match["+strconv.Itoa(k)+"]."+f, "invalid RE2 regex: "+err.Error()+"; match skipped")
			continue
		}
		out = append(out, m)
	}
	return out, len(out) > 0
}

// matchesAll reports whether one of the (applicable) clauses matches every
// request.
func matchesAll(ms []*networking.HTTPMatchRequest) bool {
	for _, m := range ms {
		if len(m.GetHeaders())+len(m.GetWithoutHeaders())+len(m.GetQueryParams()) > 0 ||
			m.GetMethod() != nil || m.GetAuthority() != nil || m.GetScheme() != nil {
			continue
		}
		switch u := m.GetUri().GetMatchType().(type) {
		case nil:
			return true
		case *networking.StringMatch_Prefix:
			if u.Prefix == "/" || u.Prefix == "" {
				return true
			}
		case *networking.StringMatch_Regex:
			if u.Regex == ".*" {
				return true
			}
		}
	}
	return false
}
