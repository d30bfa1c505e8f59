package patch

import (
	"slices"
	"strconv"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/proxy"
)

// routes patches a proxy's route configurations (RDS): a sidecar's are
// all outbound, a gateway's GATEWAY.
func (s *Set) routes(rs []build.Resource) []build.Resource {
	if !s.any(routeLevel...) {
		return rs
	}
	ctx := networking.EnvoyFilter_SIDECAR_OUTBOUND
	if s.typ == proxy.Router {
		ctx = networking.EnvoyFilter_GATEWAY
	}
	out := make([]build.Resource, 0, len(rs))
	for _, r := range rs {
		rc, _ := r.Message.(*routev3.RouteConfiguration)
		if !s.mayTouchRoutes(ctx, rc) {
			out = append(out, r)
			continue
		}
		pr, _ := s.guard("route configuration", routeLevel, r, shallowRouteConfiguration, func(m proto.Message) (proto.Message, bool) {
			s.patchRouteConfiguration(ctx, m.(*routev3.RouteConfiguration))
			return m, true
		})
		out = append(out, pr)
	}
	return out
}

func (s *Set) mayTouchRoutes(ctx context, rc *routev3.RouteConfiguration) bool {
	for _, k := range routeLevel {
		for _, p := range s.by[k] {
			if p.inContext(ctx) && routeConfigMatch(p, ctx, rc) {
				return true
			}
		}
	}
	return false
}

// patchRouteConfiguration applies the route-level patches of context ctx
// to rc (a copy), reporting whether any applied.
func (s *Set) patchRouteConfiguration(ctx context, rc *routev3.RouteConfiguration) bool {
	changed := false
	for _, p := range s.by[networking.EnvoyFilter_ROUTE_CONFIGURATION] {
		if p.inContext(ctx) && routeConfigMatch(p, ctx, rc) && p.op == networking.EnvoyFilter_Patch_MERGE {
			merge(rc, p.value)
			changed = true
		}
	}
	var vhPatches, routePatches []*Patch
	for _, p := range s.by[networking.EnvoyFilter_VIRTUAL_HOST] {
		if p.inContext(ctx) && routeConfigMatch(p, ctx, rc) {
			vhPatches = append(vhPatches, p)
		}
	}
	for _, p := range s.by[networking.EnvoyFilter_HTTP_ROUTE] {
		if p.inContext(ctx) && routeConfigMatch(p, ctx, rc) {
			routePatches = append(routePatches, p)
		}
	}
	if len(vhPatches) == 0 && len(routePatches) == 0 {
		return changed
	}
	vhs := rc.VirtualHosts[:0:0]
	for _, vh := range rc.VirtualHosts {
		// Virtual hosts are shared with the generated configuration
		// (shallowRouteConfiguration): one a patch changes is cloned.
		if slices.ContainsFunc(vhPatches, func(p *Patch) bool {
			return p.op == networking.EnvoyFilter_Patch_MERGE && virtualHostMatch(p, vh)
		}) || slices.ContainsFunc(routePatches, func(p *Patch) bool { return virtualHostMatch(p, vh) }) {
			vh = proto.Clone(vh).(*routev3.VirtualHost)
		}
		keep := true
		for _, p := range vhPatches {
			if !virtualHostMatch(p, vh) {
				continue
			}
			changed = true
			switch p.op {
			case networking.EnvoyFilter_Patch_REMOVE:
				keep = false
			case networking.EnvoyFilter_Patch_MERGE:
				merge(vh, p.value)
			case networking.EnvoyFilter_Patch_REPLACE:
				vh = cloneValue[*routev3.VirtualHost](p)
			}
			if !keep {
				break
			}
		}
		if !keep {
			continue
		}
		changed = s.patchRoutes(vh, routePatches) || changed
		vhs = append(vhs, vh)
	}
	for _, p := range vhPatches {
		if p.op == networking.EnvoyFilter_Patch_ADD {
			vhs = append(vhs, cloneValue[*routev3.VirtualHost](p))
			changed = true
		}
	}
	rc.VirtualHosts = vhs
	return changed
}

// patchRoutes applies the HTTP_ROUTE patches to a virtual host's routes:
// REMOVE and MERGE on matching routes, then the insertions.
func (s *Set) patchRoutes(vh *routev3.VirtualHost, patches []*Patch) bool {
	changed := false
	var mine []*Patch
	for _, p := range patches {
		if virtualHostMatch(p, vh) {
			mine = append(mine, p)
		}
	}
	if len(mine) == 0 {
		return false
	}
	vh.Routes = slices.DeleteFunc(vh.Routes, func(r *routev3.Route) bool {
		for _, p := range mine {
			if !routeMatch(p, r) {
				continue
			}
			switch p.op {
			case networking.EnvoyFilter_Patch_REMOVE:
				changed = true
				return true
			case networking.EnvoyFilter_Patch_MERGE:
				merge(r, p.value)
				changed = true
			}
		}
		return false
	})
	for _, p := range mine {
		named := p.match.GetRouteConfiguration().GetVhost().GetRoute() != nil
		switch p.op {
		case networking.EnvoyFilter_Patch_ADD, networking.EnvoyFilter_Patch_INSERT_BEFORE, networking.EnvoyFilter_Patch_INSERT_AFTER:
			n := len(vh.Routes)
			vh.Routes = applyListOp(p, vh.Routes, func(r *routev3.Route) bool { return routeMatch(p, r) }, named,
				func() *routev3.Route { return cloneValue[*routev3.Route](p) })
			changed = changed || len(vh.Routes) != n
		case networking.EnvoyFilter_Patch_INSERT_FIRST:
			// As Istio: first in the virtual host, when the named route (if
			// any) is there.
			if !named || slices.ContainsFunc(vh.Routes, func(r *routev3.Route) bool { return routeMatch(p, r) }) {
				vh.Routes = slices.Insert(vh.Routes, 0, cloneValue[*routev3.Route](p))
				changed = true
			}
		}
	}
	return changed
}

// shallowRouteConfiguration copies a route configuration but not its
// virtual hosts, which it shares: patchRouteConfiguration clones those
// it changes.
func shallowRouteConfiguration(m proto.Message) proto.Message {
	rc := m.(*routev3.RouteConfiguration)
	c := &routev3.RouteConfiguration{}
	mergeMessage(c.ProtoReflect(), rc.ProtoReflect(), vhostsField)
	c.VirtualHosts = slices.Clone(rc.GetVirtualHosts())
	return c
}

var vhostsField = (&routev3.RouteConfiguration{}).ProtoReflect().Descriptor().Fields().ByName("virtual_hosts").Number()

// routeConfigMatch: a sidecar's route configuration by name and port (the
// port its name holds: "8080", "inbound|8080||"); a gateway's by name,
// port, server port name and gateway ("https.443.NAME.GATEWAY.NAMESPACE").
func routeConfigMatch(p *Patch, ctx context, rc *routev3.RouteConfiguration) bool {
	m := p.match.GetRouteConfiguration()
	if m == nil {
		return true
	}
	if m.GetName() != "" && m.GetName() != rc.GetName() {
		return false
	}
	port, portName, gateway := parseRouteName(rc.GetName())
	if m.GetPortNumber() != 0 && uint32(port) != m.GetPortNumber() {
		return false
	}
	if ctx == networking.EnvoyFilter_GATEWAY {
		if m.GetPortName() != "" && m.GetPortName() != portName {
			return false
		}
		if m.GetGateway() != "" && m.GetGateway() != gateway {
			return false
		}
	}
	return true
}

// parseRouteName returns the port of a route configuration name and, for
// a gateway's TLS server, its port name and gateway ("namespace/name").
func parseRouteName(name string) (port int, portName, gateway string) {
	switch {
	case strings.HasPrefix(name, "http."):
		port, _ = strconv.Atoi(strings.TrimPrefix(name, "http."))
	case strings.HasPrefix(name, "https.") && strings.Count(name, ".") == 4:
		parts := strings.Split(name, ".")
		port, _ = strconv.Atoi(parts[1])
		portName, gateway = parts[2], parts[4]+"/"+parts[3]
	case strings.HasPrefix(name, "inbound|"):
		// "inbound|PORT||" (a sidecar's inline inbound routes)
		port, _ = strconv.Atoi(strings.Split(name, "|")[1])
	default:
		port, _ = strconv.Atoi(name)
	}
	return port, portName, gateway
}

func virtualHostMatch(p *Patch, vh *routev3.VirtualHost) bool {
	m := p.match.GetRouteConfiguration().GetVhost()
	if m == nil {
		return true
	}
	return (m.GetName() == "" || m.GetName() == vh.GetName()) &&
		(m.GetDomainName() == "" || slices.Contains(vh.GetDomains(), m.GetDomainName()))
}

func routeMatch(p *Patch, r *routev3.Route) bool {
	m := p.match.GetRouteConfiguration().GetVhost().GetRoute()
	if m == nil {
		return true
	}
	if m.GetName() != "" && m.GetName() != r.GetName() {
		return false
	}
	switch m.GetAction() {
	case networking.EnvoyFilter_RouteConfigurationMatch_RouteMatch_ROUTE:
		return r.GetRoute() != nil
	case networking.EnvoyFilter_RouteConfigurationMatch_RouteMatch_REDIRECT:
		return r.GetRedirect() != nil
	case networking.EnvoyFilter_RouteConfigurationMatch_RouteMatch_DIRECT_RESPONSE:
		return r.GetDirectResponse() != nil
	}
	return true
}
