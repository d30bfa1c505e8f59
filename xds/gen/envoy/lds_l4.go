package envoy

import (
	"slices"
	"strconv"
	"strings"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/mesh"
)

// l4Match is what VirtualService tcp and tls matches share.
type l4Match interface {
	GetPort() uint32
	GetSourceLabels() map[string]string
	GetGateways() []string
	GetSourceNamespace() string
}

// l4Applies reports whether a tcp/tls match applies to traffic on port
// (0: any) for this proxy, acting as gateway gw (nil: as a sidecar, the
// "mesh" gateway). vsNS resolves bare gateway names in match.gateways.
func (b *listenerBuilder) l4Applies(m l4Match, port uint32, gw *mesh.Config, vsNS string) bool {
	if p := m.GetPort(); p != 0 && port != 0 && p != port {
		return false
	}
	if !mesh.Matches(m.GetSourceLabels(), b.v.Labels()) {
		return false
	}
	if ns := m.GetSourceNamespace(); ns != "" && ns != b.v.Key().Namespace {
		return false
	}
	if gws := m.GetGateways(); len(gws) > 0 && !namesGateway(gws, gw, vsNS) {
		return false
	}
	return true
}

// namesGateway reports whether a VirtualService gateways list names gw
// (nil: "mesh"). Bare names are in the VirtualService's namespace.
func namesGateway(gws []string, gw *mesh.Config, vsNS string) bool {
	if gw == nil {
		return slices.Contains(gws, "mesh")
	}
	for _, g := range gws {
		ns, name, ok := strings.Cut(g, "/")
		if !ok {
			ns, name = vsNS, g
		}
		if ns == gw.Object.Namespace && name == gw.Object.Name {
			return true
		}
	}
	return false
}

// l4Routes returns the tcp_proxy destinations of VirtualService route
// destinations. defaultPort applies to destinations without a port; 0
// means "the destination service's only port". Destinations that cannot be
// resolved are reported and left out; nil when none is left.
func (b *listenerBuilder) l4Routes(vs *mesh.Config, field string, routes []*networking.RouteDestination, defaultPort uint32) []weightedCluster {
	out := make([]weightedCluster, 0, len(routes))
	anyWeight := false
	for _, r := range routes {
		if r.GetWeight() > 0 {
			anyWeight = true
		}
	}
	for i, r := range routes {
		f := field + "[" + strconv.Itoa(i) + "].destination"
		d := r.GetDestination()
		if anyWeight && r.GetWeight() == 0 {
			continue // a zero weight takes no traffic
		}
		host := b.v.Snapshot().ResolveHost(d.GetHost(), vs)
		svc := b.v.Service(host)
		port := d.GetPort().GetNumber()
		if port == 0 {
			port = defaultPort
		}
		if port == 0 {
			if svc != nil && len(svc.Ports) == 1 {
				port = svc.Ports[0].Number
			} else {
				b.problems.Addf(vs.Ref(), f+".port", "a port is required: %s does not have exactly one port", host)
				continue
			}
		}
		if svc == nil {
			// Kept: a cluster that does not exist closes connections,
			// which is what the route asks for until the host appears.
			b.problems.Addf(vs.Ref(), f+".host", "host %s is not a service visible to this proxy", host)
		}
		if ss := d.GetSubset(); ss != "" {
			if _, ok := b.v.Subset(host, ss); !ok {
				b.problems.Addf(vs.Ref(), f+".subset", "subset %q is not defined by a DestinationRule of %s", ss, host)
			}
		}
		w := r.GetWeight()
		if !anyWeight {
			w = 1
		}
		out = append(out, weightedCluster{cluster: build.ClusterName(host, port, d.GetSubset()), weight: uint32(w)})
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// sidecarTCPRoute returns where a sidecar sends TCP connections for a
// service port: the first tcp route of the host's VirtualService that
// applies, else the service's own cluster.
func (b *listenerBuilder) sidecarTCPRoute(svc *mesh.Service, port uint32) []weightedCluster {
	if vs := b.sidecarVirtualService(svc.Hostname, "spec.tcp", func(vs *networking.VirtualService) bool { return len(vs.GetTcp()) > 0 }); vs != nil {
		for i, r := range vs.VirtualService().GetTcp() {
			if !b.anyL4Match(r.GetMatch(), port, nil, vs.Object.Namespace) {
				continue
			}
			if d := b.l4Routes(vs, "spec.tcp["+strconv.Itoa(i)+"].route", r.GetRoute(), port); d != nil {
				return d
			}
		}
	}
	return []weightedCluster{{cluster: build.ClusterName(svc.Hostname, port, ""), weight: 1}}
}

// anyL4Match reports whether a route applies: it has no match, or one of
// its matches applies.
func (b *listenerBuilder) anyL4Match(ms []*networking.L4MatchAttributes, port uint32, gw *mesh.Config, vsNS string) bool {
	if len(ms) == 0 {
		return true
	}
	for _, m := range ms {
		if b.l4Applies(m, port, gw, vsNS) {
			return true
		}
	}
	return false
}

// sidecarVirtualService returns the VirtualService that applies to host
// for a sidecar, reporting the ones it shadows that have routes of the
// kind relevant here (has; field names that kind).
func (b *listenerBuilder) sidecarVirtualService(host, field string, has func(*networking.VirtualService) bool) *mesh.Config {
	list := b.v.VirtualServices(host)
	if len(list) == 0 {
		return nil
	}
	for _, o := range list[1:] {
		if has(o.VirtualService()) {
			b.problems.Addf(o.Ref(), field, "not applied to host %s: %s takes precedence", host, list[0].Ref())
		}
	}
	return list[0]
}
