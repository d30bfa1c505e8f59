package envoy

import (
	"sort"
	"strconv"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/routes"
	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// Virtual host names of a sidecar's catch-all virtual host.
const (
	AllowAnyVirtualHost = "allow_any"
	BlockAllVirtualHost = "block_all"
)

// Routes generates the proxy's route configurations (RDS): for a sidecar,
// one per outbound HTTP port (SidecarRouteName); for a router, one per
// plain-HTTP gateway port (GatewayHTTPRouteName) and one per
// TLS-terminating server (GatewayHTTPSRouteName).
//
// Each is encoded too (Resource.Wire), by one build.Encoder: what routes
// share (a retry policy, a timeout, a match) is encoded once rather than
// once per route.
func Routes(v *scope.View) []build.Resource {
	rb := newRouteBuilder(v)
	var out []build.Resource
	switch v.Key().Type {
	case proxy.Sidecar:
		out = rb.sidecarRoutes()
	case proxy.Router:
		out = rb.gatewayRoutes()
	}
	var enc build.Encoder
	for i := range out {
		// A message that does not encode is left to resource.Prepare,
		// which drops it (generated messages always encode).
		out[i].Wire, _ = enc.Marshal(out[i].Message)
	}
	return out
}

// routeBuilder holds what one Routes call shares: the translator and the
// translations already made (a VirtualService naming several hosts is
// translated once per port and context). It belongs to one goroutine.
type routeBuilder struct {
	v        *scope.View
	problems *build.Problems
	t        *routes.Translator
	// cache holds the translations made (built on first use).
	cache map[routeCacheKey][]*routev3.Route
	// contextFree caches Translator.ContextFree by VirtualService.
	contextFree map[*mesh.Config]bool
	// sidecarVS caches View.VirtualServices by host for hosts with
	// several ports.
	sidecarVS  map[string][]*mesh.Config
	noValidate *wrapperspb.BoolValue
	// matchAll is the "/" prefix match of default routes (shared).
	matchAll *routev3.RouteMatch
}

// routeCacheKey is a translation's context; port 0 and no gateway for a
// context-free VirtualService's only translation.
type routeCacheKey struct {
	cfg     *mesh.Config
	port    uint32
	gateway *mesh.Config // nil: mesh
}

func newRouteBuilder(v *scope.View) *routeBuilder {
	return &routeBuilder{v: v, problems: v.Problems(), t: routes.ForEnvoy(v), sidecarVS: map[string][]*mesh.Config{}, noValidate: wrapperspb.Bool(false)}
}

// translate translates cfg's routes for port, as gateway gw's (nil: as
// the sidecar's), once per builder: once for every port and gateway when
// they make no difference (Translator.ContextFree).
func (rb *routeBuilder) translate(cfg *mesh.Config, port uint32, gw *mesh.Config) []*routev3.Route {
	if rb.cache == nil {
		// Sized for a VirtualService per visible service, so that they
		// do not grow while a proxy's routes are built.
		n := len(rb.v.Services())
		rb.cache, rb.contextFree = make(map[routeCacheKey][]*routev3.Route, n), make(map[*mesh.Config]bool, n)
	}
	free, checked := rb.contextFree[cfg]
	if !checked {
		free = rb.t.ContextFree(cfg)
		rb.contextFree[cfg] = free
	}
	k := routeCacheKey{cfg: cfg}
	if !free {
		k.port, k.gateway = port, gw
	}
	if rs, ok := rb.cache[k]; ok {
		return rs
	}
	ctx := routes.Mesh(port)
	if gw != nil {
		ctx = routes.Gateway(gw, port)
	}
	rs := rb.t.VirtualService(cfg, ctx)
	rb.cache[k] = rs
	return rs
}

// sidecarRoutes builds one route configuration per port number on which
// a visible service has an HTTP port, or a sniffed one without an address
// of its own; and one per sniffed port of a service with an address
// (SniffedRouteName).
func (rb *routeBuilder) sidecarRoutes() []build.Resource {
	v := rb.v
	byPort := map[uint32][]*mesh.Service{}
	var ports []uint32
	var sniffed []build.Resource
	for _, svc := range v.Services() {
		for _, p := range svc.Ports {
			if isSniffed(p.Protocol) && hasListenAddress(v, svc) {
				sniffed = append(sniffed, rb.sniffedRoute(svc, p.Number))
				continue
			}
			if !isHTTP(p.Protocol) && !isSniffed(p.Protocol) {
				continue
			}
			if _, ok := byPort[p.Number]; !ok {
				ports = append(ports, p.Number)
			}
			byPort[p.Number] = append(byPort[p.Number], svc)
		}
	}
	sort.Slice(ports, func(i, j int) bool { return ports[i] < ports[j] })

	catchAll := rb.catchAllVirtualHost()
	out := make([]build.Resource, 0, len(ports))
	for _, port := range ports {
		name := SidecarRouteName(port)
		rc := &routev3.RouteConfiguration{
			Name: name,
			// Clusters are pushed separately (CDS) and may arrive later.
			ValidateClusters: rb.noValidate,
		}
		seen := make(map[string]bool, 4*len(byPort[port]))
		rc.VirtualHosts = make([]*routev3.VirtualHost, 0, len(byPort[port])+1)
		for _, svc := range byPort[port] { // sorted by hostname: the first keeps a shared domain
			domains, name := rb.domains(svc, port, seen)
			if len(domains) == 0 {
				continue // every name already taken by an earlier service
			}
			routes, d := rb.sidecarHostRoutes(svc, port)
			var vh *routev3.VirtualHost
			if d != nil {
				vh = &d.host // one allocation with its default route
			} else {
				vh = &routev3.VirtualHost{}
			}
			vh.Name, vh.Domains, vh.Routes = name, domains, routes
			rc.VirtualHosts = append(rc.VirtualHosts, vh)
		}
		rc.VirtualHosts = append(rc.VirtualHosts, catchAll)
		out = append(out, build.Resource{Name: name, Message: rc})
	}
	return append(out, sniffed...)
}

// sniffedRoute is the route configuration of a sniffed port of a service
// with an address: its own virtual host, then the catch-all one.
func (rb *routeBuilder) sniffedRoute(svc *mesh.Service, port uint32) build.Resource {
	name := SniffedRouteName(svc.Hostname, port)
	domains, _ := rb.domains(svc, port, map[string]bool{})
	routes, _ := rb.sidecarHostRoutes(svc, port)
	rc := &routev3.RouteConfiguration{
		Name:             name,
		ValidateClusters: rb.noValidate,
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    name,
			Domains: domains,
			Routes:  routes,
		}, rb.catchAllVirtualHost()},
	}
	return build.Resource{Name: name, Message: rc}
}

// catchAllVirtualHost is the "*" virtual host: passthrough under
// ALLOW_ANY, a 502 under REGISTRY_ONLY.
func (rb *routeBuilder) catchAllVirtualHost() *routev3.VirtualHost {
	all := &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}
	if rb.v.AllowAny() {
		return &routev3.VirtualHost{Name: AllowAnyVirtualHost, Domains: []string{"*"}, Routes: []*routev3.Route{{
			Name:  AllowAnyVirtualHost,
			Match: all,
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{
				ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: build.PassthroughCluster},
				Timeout:          rb.t.NoTimeout(),
			}},
		}}}
	}
	return &routev3.VirtualHost{Name: BlockAllVirtualHost, Domains: []string{"*"}, Routes: []*routev3.Route{{
		Name:   BlockAllVirtualHost,
		Match:  all,
		Action: &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{Status: 502}},
	}}}
}

// domains lists the names a client of the proxy may use for svc on port
// that no earlier service took: the hostname, for Kubernetes services the
// short forms the proxy's namespace resolves ("name", "name.ns",
// "name.ns.svc", ... in the service's namespace; "name.ns" onwards from
// elsewhere), and the VIPs, each also with ":port". Envoy rejects a
// route configuration with a domain twice (RouteConfiguration docs,
// virtual_hosts), so seen records what is taken. hostPort is
// "hostname:port", the name of the service's virtual host.
func (rb *routeBuilder) domains(svc *mesh.Service, port uint32, seen map[string]bool) (domains []string, hostPort string) {
	var psBuf [11]byte
	ps := strconv.AppendUint(append(psBuf[:0], ':'), uint64(port), 10)
	addrs := rb.v.Addresses(svc)
	var namesBuf [8]string
	names := append(namesBuf[:0], svc.Hostname)
	if d, ok := rb.v.Snapshot().ServiceSuffix(svc); ok {
		// name.ns.svc.<suffix>: every shorter form ending at a dot.
		suffix := "." + svc.Namespace + ".svc." + d
		start := len(svc.Hostname) - len(suffix) // the dot after "name"
		if svc.Namespace != rb.v.Key().Namespace {
			start += 1 + len(svc.Namespace) // the dot after "name.ns"
		}
		for i := start; i < len(svc.Hostname); i++ {
			if svc.Hostname[i] == '.' {
				names = append(names, svc.Hostname[:i])
			}
		}
	}
	names = append(names, addrs...)
	// Every name with ":port", in one string.
	size := 0
	for _, n := range names {
		size += len(n) + len(ps)
	}
	var b strings.Builder
	b.Grow(size)
	for _, n := range names {
		b.WriteString(n)
		b.Write(ps)
	}
	withPorts := b.String()
	out := make([]string, 0, 2*len(names))
	for _, n := range names {
		withPort := withPorts[:len(n)+len(ps)]
		withPorts = withPorts[len(withPort):]
		for _, d := range [2]string{n, withPort} {
			if !seen[d] {
				seen[d] = true
				out = append(out, d)
			}
		}
		if hostPort == "" {
			hostPort = withPort
		}
	}
	return out, hostPort
}

// sidecarHostRoutes are the routes of svc on port: from the first
// VirtualService that applies (the others are reported as shadowed), or
// one default route to the port's cluster.
//
// d is the default route's allocation, which has room for the host's
// virtual host; nil for a VirtualService's routes.
func (rb *routeBuilder) sidecarHostRoutes(svc *mesh.Service, port uint32) (routes []*routev3.Route, d *defaultRoute) {
	var vss []*mesh.Config
	if len(svc.Ports) == 1 {
		vss = rb.v.VirtualServices(svc.Hostname) // asked once
	} else if cached, done := rb.sidecarVS[svc.Hostname]; done {
		vss = cached
	} else {
		vss = rb.v.VirtualServices(svc.Hostname)
		rb.sidecarVS[svc.Hostname] = vss
	}
	for _, other := range vss[min(1, len(vss)):] {
		rb.problems.Addf(other.Ref(), "spec.hosts", "shadowed: host %s is already routed for sidecars by %s; this VirtualService is ignored for it", svc.Hostname, vss[0].Ref())
	}
	if len(vss) > 0 {
		if rs := rb.translate(vss[0], port, nil); len(rs) > 0 {
			return rs, nil
		}
	}
	// The service's consistentHash (its DestinationRule for the port)
	// applies without a VirtualService too, as in Istio.
	hash := rb.t.HashPolicy(svc.Hostname, port, "")
	if rb.matchAll == nil {
		rb.matchAll = &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}
	}
	d = &defaultRoute{}
	d.cluster.Cluster = build.ClusterName(svc.Hostname, port, "")
	// Field by field: a composite literal would build the large
	// RouteAction apart and copy it.
	d.action.ClusterSpecifier, d.action.Timeout = &d.cluster, rb.t.NoTimeout()
	d.action.RetryPolicy, d.action.HashPolicy = rb.t.DefaultRetryPolicy(len(hash) > 0), hash
	d.routeAction.Route = &d.action
	d.route.Name, d.route.Match, d.route.Action = "default", rb.matchAll, &d.routeAction
	d.list[0] = &d.route
	return d.list[:], d
}

// defaultRoute is a host's default route (one, to its cluster) and its
// virtual host in one allocation: a sidecar has one per service port
// without a VirtualService.
type defaultRoute struct {
	host        routev3.VirtualHost
	list        [1]*routev3.Route
	route       routev3.Route
	routeAction routev3.Route_Route
	action      routev3.RouteAction
	cluster     routev3.RouteAction_Cluster
}
