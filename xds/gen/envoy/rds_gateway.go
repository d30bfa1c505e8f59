package envoy

import (
	"encoding/binary"
	"slices"
	"sort"
	"strconv"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/mesh"
)

// gatewayVHost collects one virtual host of a gateway route configuration.
type gatewayVHost struct {
	host       string
	requireTLS bool
	vss        []vsThrough  // merged, in the order met
	first      [1]vsThrough // vss's first backing array (most hosts have one)
}

// vsThrough is a VirtualService and the gateway it came through.
type vsThrough struct{ vs, gw *mesh.Config }

// vhostKey is what a gateway virtual host's routes are made of (see
// gatewayRouteConfig): the TLS requirement and its VirtualServices with
// their gateways, in order — the only one, or all numbered in more.
type vhostKey struct {
	requireTLS bool
	one        vsThrough
	more       string
}

// gatewayRoutes builds the route configurations the router's listeners
// refer to (gatewayPlan decides which servers are served): one shared by
// all plain HTTP servers on a port, and one per TLS-terminated HTTPS
// server.
func (rb *routeBuilder) gatewayRoutes() []build.Resource {
	var out []build.Resource
	for _, gp := range newListenerBuilder(rb.v).gatewayPlan() {
		switch gp.kind {
		case gwHTTP:
			// Keyed by the port the listener binds, which names the route
			// configuration; domains carry the server port clients use.
			hosts := map[string]*gatewayVHost{}
			for _, s := range gp.servers {
				rb.collectHosts(hosts, s.gw, s.srv, rb.v.GatewayVirtualServices(s.gw))
			}
			name := GatewayHTTPRouteName(gp.port)
			out = append(out, build.Resource{Name: name, Message: rb.gatewayRouteConfig(name, gp.servers[0].srv.GetPort().GetNumber(), hosts)})
		case gwSNI:
			for _, s := range gp.servers {
				if s.route == "" {
					continue
				}
				hosts := map[string]*gatewayVHost{}
				rb.collectHosts(hosts, s.gw, s.srv, rb.v.GatewayVirtualServices(s.gw))
				out = append(out, build.Resource{Name: s.route, Message: rb.gatewayRouteConfig(s.route, s.srv.GetPort().GetNumber(), hosts)})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// serverID is how route and listener names refer to a gateway server:
// its name, or its index in spec.servers.
func serverID(srv *networking.Server, index int) string {
	if srv.GetName() != "" {
		return srv.GetName()
	}
	return strconv.Itoa(index)
}

// collectHosts adds to hosts the virtual hosts server srv of gateway gw
// gets from its VirtualServices: one per VirtualService host a server
// host matches (wildcards either way), named by the more specific of the
// two. Several VirtualServices for one host merge.
func (rb *routeBuilder) collectHosts(hosts map[string]*gatewayVHost, gw *mesh.Config, srv *networking.Server, vss []*mesh.Config) {
	for _, vs := range vss {
		for _, h := range vs.VirtualService().GetHosts() {
			h = rb.v.Snapshot().ResolveHost(h, vs)
			for _, sh := range srv.GetHosts() {
				ns, shost, ok := strings.Cut(sh, "/")
				if !ok {
					ns, shost = "*", sh
				}
				if ns == "." {
					ns = gw.Object.Namespace
				}
				if ns != "*" && ns != vs.Object.Namespace {
					continue
				}
				var host string
				switch {
				case scope.HostMatches(shost, h):
					host = h
				case scope.HostMatches(h, shost):
					host = shost
				default:
					continue
				}
				vh := hosts[host]
				if vh == nil {
					vh = &gatewayVHost{host: host}
					vh.vss = vh.first[:0]
					hosts[host] = vh
				}
				vh.requireTLS = vh.requireTLS || srv.GetTls().GetHttpsRedirect()
				if !slices.Contains(vh.vss, vsThrough{vs, gw}) && (!slices.ContainsFunc(vh.vss, func(p vsThrough) bool { return p.vs == vs }) || matchesNameGateways(vs)) {
					vh.vss = append(vh.vss, vsThrough{vs, gw})
				}
			}
		}
	}
}

// matchesNameGateways reports whether a route match of vs names gateways:
// only then do its routes differ between two gateways that share a port,
// and it is translated once per gateway; otherwise once.
func matchesNameGateways(vs *mesh.Config) bool {
	for _, hr := range vs.VirtualService().GetHttp() {
		for _, m := range hr.GetMatch() {
			if len(m.GetGateways()) > 0 {
				return true
			}
		}
	}
	return false
}

// gatewayRouteConfig builds one gateway route configuration. Hosts whose
// routes are the same — the same VirtualServices through the same
// gateways in the same order, and the same TLS requirement — share one
// virtual host with all their domains (Istio does the same): a
// VirtualService with three hosts is one virtual host, not three copies
// of its routes. Envoy picks a virtual host by domain, and each host's
// domains are in exactly one, so requests route as with one virtual host
// per host.
func (rb *routeBuilder) gatewayRouteConfig(name string, port uint32, hosts map[string]*gatewayVHost) *routev3.RouteConfiguration {
	rc := &routev3.RouteConfiguration{Name: name, ValidateClusters: rb.noValidate}
	names := make([]string, 0, len(hosts))
	for h := range hosts {
		names = append(names, h)
	}
	slices.Sort(names)
	ps := ":" + strconv.FormatUint(uint64(port), 10)
	shared := make(map[vhostKey]*routev3.VirtualHost, len(names))
	var ids map[*mesh.Config]uint32 // configs by small number, for keys
	id := func(c *mesh.Config) uint32 {
		if ids == nil {
			ids = map[*mesh.Config]uint32{}
		}
		n, ok := ids[c]
		if !ok {
			n = uint32(len(ids))
			ids[c] = n
		}
		return n
	}
	var more []byte
	for _, h := range names {
		vh := hosts[h]
		// Oldest VirtualService first (stable: namespace/name breaks ties).
		if len(vh.vss) > 1 {
			slices.SortStableFunc(vh.vss, func(a, b vsThrough) int {
				ta, tb := a.vs.Object.CreationTime, b.vs.Object.CreationTime
				switch {
				case ta.IsZero() != tb.IsZero():
					if ta.IsZero() {
						return 1
					}
					return -1
				case ta.Before(tb):
					return -1
				case tb.Before(ta):
					return 1
				}
				return 0
			})
		}
		key := vhostKey{requireTLS: vh.requireTLS}
		if len(vh.vss) == 1 {
			key.one = vh.vss[0]
		} else {
			more = more[:0]
			for _, p := range vh.vss {
				more = binary.LittleEndian.AppendUint32(more, id(p.vs))
				more = binary.LittleEndian.AppendUint32(more, id(p.gw))
			}
			key.more = string(more)
		}
		hp := h + ps
		if evh := shared[key]; evh != nil {
			evh.Domains = appendDomains(evh.Domains, h, hp)
			continue
		}
		// Room for the domains of the other hosts of its VirtualService,
		// which usually share the virtual host.
		domains := appendDomains(make([]string, 0, 2*len(vh.vss[0].vs.VirtualService().GetHosts())), h, hp)
		evh := &routev3.VirtualHost{Name: hp, Domains: domains}
		if vh.requireTLS {
			evh.RequireTls = routev3.VirtualHost_ALL
		}
		if len(vh.vss) == 1 {
			// The translation's own slice, capped so appends copy.
			rs := rb.translate(vh.vss[0].vs, port, vh.vss[0].gw)
			evh.Routes = rs[:len(rs):len(rs)]
		} else {
			for _, p := range vh.vss {
				evh.Routes = append(evh.Routes, rb.translate(p.vs, port, p.gw)...)
			}
		}
		shared[key] = evh
		rc.VirtualHosts = append(rc.VirtualHosts, evh)
	}
	return rc
}

// appendDomains appends a gateway virtual host's domains for host h:
// h and hp (h with the port), or only "*".
func appendDomains(domains []string, h, hp string) []string {
	if h == "*" {
		return append(domains, h)
	}
	return append(domains, h, hp)
}
