package envoy

import (
	"net/netip"
	"slices"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/policy"
	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/mesh"
)

// svcPort is one port of one service.
type svcPort struct {
	svc  *mesh.Service
	port mesh.Port
}

// outboundPort collects what the visible services put on one port number
// of the 0.0.0.0 address.
type outboundPort struct {
	http  *svcPort // the first HTTP one: one listener whose routes (RDS) cover them all
	tls   []svcPort
	sniff []svcPort // undeclared protocol, services without a usable VIP
	tcp   []svcPort // services without a usable VIP
}

// sidecarOutbound adds the sidecar's outbound listeners. None binds a
// port: virtualOutbound accepts every redirected connection and hands it
// to the listener of its original destination, the most specific address
// first, then 0.0.0.0 (Envoy docs, "Listener > use_original_dst").
func (b *listenerBuilder) sidecarOutbound() {
	v := b.v
	byPort := map[uint32]*outboundPort{}
	vipOwner := map[string]string{}
	for _, svc := range v.Services() {
		vips := b.listenAddresses(svc)
		for _, p := range svc.Ports {
			if p.Number == VirtualOutboundPort || p.Number == VirtualInboundPort {
				b.problems.Addf(serviceRef(svc), "spec.ports", "port %d of %s is reserved for the sidecar's own listeners; no outbound listener for it", p.Number, svc.Hostname)
				continue
			}
			u := byPort[p.Number]
			if u == nil {
				u = &outboundPort{}
				byPort[p.Number] = u
			}
			sp := svcPort{svc: svc, port: p}
			switch {
			case isHTTP(p.Protocol):
				if u.http == nil {
					first := sp
					u.http = &first
				}
			case isTLS(p.Protocol):
				u.tls = append(u.tls, sp)
			case len(vips) > 0:
				dests := b.sidecarTCPRoute(svc, p.Number)
				for _, vip := range vips {
					name := OutboundListenerName(vip, p.Number)
					if owner, dup := vipOwner[name]; dup {
						b.problems.Addf(serviceRef(svc), "spec.addresses", "address %s port %d is also used by %s, which wins (first by hostname)", vip, p.Number, owner)
						continue
					}
					vipOwner[name] = svc.Hostname
					tcp := b.tcpProxy(policy.ClientSide, build.ClusterName(svc.Hostname, p.Number, ""), dests)
					if isSniffed(p.Protocol) {
						b.add(b.sniffedListener(name, vip, p.Number, SniffedRouteName(svc.Hostname, p.Number), tcp))
						continue
					}
					l := listener(name, vip, p.Number, false, corev3.TrafficDirection_OUTBOUND)
					l.FilterChains = []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{tcp}}}
					b.add(l)
				}
			case isSniffed(p.Protocol):
				u.sniff = append(u.sniff, sp)
			default:
				u.tcp = append(u.tcp, sp)
			}
		}
	}
	ports := make([]uint32, 0, len(byPort))
	for p := range byPort {
		ports = append(ports, p)
	}
	slices.Sort(ports)
	for _, port := range ports {
		u := byPort[port]
		switch {
		case u.http != nil:
			// Sniffed services' HTTP is routed (their virtual hosts are
			// in the port's routes).
			b.reportLosers(u.tls, *u.http, "HTTP")
			for _, l := range u.sniff {
				b.problems.Addf(serviceRef(l.svc), "spec.ports", "%s port %d has no declared protocol nor an address of its own and %s takes 0.0.0.0:%d as HTTP: its HTTP is routed, its other TCP is not",
					l.svc.Hostname, port, u.http.svc.Hostname, port)
			}
			b.reportLosers(u.tcp, *u.http, "HTTP")
			name := OutboundListenerName("0.0.0.0", port)
			l := listener(name, "0.0.0.0", port, false, corev3.TrafficDirection_OUTBOUND)
			l.FilterChains = []*listenerv3.FilterChain{{
				Filters: []*listenerv3.Filter{b.rdsHCM("outbound_"+name, SidecarRouteName(port), b.outboundHTTPFilters, false)},
			}}
			b.add(l)
		case len(u.tls) > 0:
			b.reportLosers(u.sniff, u.tls[0], "TLS")
			b.reportLosers(u.tcp, u.tls[0], "TLS")
			b.add(b.sidecarTLSListener(port, u.tls))
		case len(u.sniff) > 0:
			// HTTP to any of them is routed by host (the port's routes);
			// other TCP goes to the first.
			first := u.sniff[0]
			b.reportLosers(u.tcp, first, "sniffed HTTP or TCP")
			for _, l := range u.sniff[1:] {
				b.problems.Addf(serviceRef(l.svc), "spec.ports", "%s port %d has no declared protocol nor an address of its own and shares 0.0.0.0:%d with %s: its HTTP is routed, its other TCP goes to %s",
					l.svc.Hostname, port, port, first.svc.Hostname, first.svc.Hostname)
			}
			name := OutboundListenerName("0.0.0.0", port)
			tcp := b.tcpProxy(policy.ClientSide, build.ClusterName(first.svc.Hostname, port, ""), b.sidecarTCPRoute(first.svc, port))
			b.add(b.sniffedListener(name, "0.0.0.0", port, SidecarRouteName(port), tcp))
		case len(u.tcp) > 0:
			first := u.tcp[0]
			b.reportLosers(u.tcp[1:], first, "TCP")
			name := OutboundListenerName("0.0.0.0", port)
			l := listener(name, "0.0.0.0", port, false, corev3.TrafficDirection_OUTBOUND)
			l.FilterChains = []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{
				b.tcpProxy(policy.ClientSide, build.ClusterName(first.svc.Hostname, port, ""), b.sidecarTCPRoute(first.svc, port)),
			}}}
			b.add(l)
		}
	}
}

// reportLosers reports services that get no 0.0.0.0 outbound listener
// because winner's protocol took the port.
func (b *listenerBuilder) reportLosers(losers []svcPort, winner svcPort, kind string) {
	for _, l := range losers {
		b.problems.Addf(serviceRef(l.svc), "spec.ports", "%s port %d (%s) has no address of its own and %s takes 0.0.0.0:%d as %s; its traffic is not routed by the sidecar",
			l.svc.Hostname, l.port.Number, l.port.Protocol, winner.svc.Hostname, l.port.Number, kind)
	}
}

// hasListenAddress reports whether listenAddresses finds an address of
// svc to listen on for the proxy of v.
func hasListenAddress(v *scope.View, svc *mesh.Service) bool {
	for _, a := range v.Addresses(svc) {
		if _, err := netip.ParseAddr(a); err == nil {
			return true
		}
		if pf, err := netip.ParsePrefix(a); err == nil && pf.IsSingleIP() {
			return true
		}
	}
	return false
}

// listenAddresses returns the service VIPs a listener can bind to. Address
// ranges (CIDR) and unparsable addresses are reported and skipped.
func (b *listenerBuilder) listenAddresses(svc *mesh.Service) []string {
	addrs := b.v.Addresses(svc)
	if len(addrs) == 0 {
		return nil
	}
	// Most addresses are IPv4 as written, which netip parses only in
	// their canonical form: then the list itself serves (shared, read
	// only).
	var out []string
	for i, a := range addrs {
		ip, err := netip.ParseAddr(a)
		if err == nil && ip.Is4() {
			if out != nil {
				out = append(out, a)
			}
			continue
		}
		if out == nil {
			out = append(make([]string, 0, len(addrs)), addrs[:i]...)
		}
		if err == nil {
			out = append(out, ip.String())
			continue
		}
		if pf, err := netip.ParsePrefix(a); err == nil && pf.IsSingleIP() {
			out = append(out, pf.Addr().String())
			continue
		}
		b.problems.Addf(serviceRef(svc), "spec.addresses", "address %q of %s is not a single IP; TCP listeners for address ranges are not supported, it is ignored", a, svc.Hostname)
	}
	if out == nil {
		return addrs
	}
	return out
}

// sidecarTLSListener routes TLS by SNI without terminating it: first the
// tls routes of the services' VirtualServices (in service order, first
// claim of a server name wins), then each service's own hostname.
// Connections with no matching SNI take the passthrough/blackhole chain.
func (b *listenerBuilder) sidecarTLSListener(port uint32, sps []svcPort) *listenerv3.Listener {
	claimed := map[string]string{} // server name -> claiming config
	done := map[*mesh.Config]bool{}
	var chains []*listenerv3.FilterChain
	for _, sp := range sps {
		vs := b.sidecarVirtualService(sp.svc.Hostname, "spec.tls", func(vs *networking.VirtualService) bool { return len(vs.GetTls()) > 0 })
		if vs == nil || done[vs] {
			continue
		}
		done[vs] = true
		for i, r := range vs.VirtualService().GetTls() {
			field := "spec.tls[" + strconv.Itoa(i) + "]"
			for j, m := range r.GetMatch() {
				if !b.l4Applies(m, port, nil, vs.Object.Namespace) {
					continue
				}
				names := b.claim(claimed, m.GetSniHosts(), vs.Ref(), field+".match["+strconv.Itoa(j)+"].sniHosts")
				if len(names) == 0 {
					continue
				}
				dests := b.l4Routes(vs, field+".route", r.GetRoute(), port)
				if dests == nil {
					continue
				}
				chains = append(chains, &listenerv3.FilterChain{
					FilterChainMatch: &listenerv3.FilterChainMatch{ServerNames: names},
					Filters:          []*listenerv3.Filter{b.tcpProxy(policy.ClientSide, dests[0].cluster, dests)},
				})
			}
		}
	}
	for _, sp := range sps {
		if _, taken := claimed[sp.svc.Hostname]; taken {
			continue
		}
		claimed[sp.svc.Hostname] = serviceRef(sp.svc)
		cluster := build.ClusterName(sp.svc.Hostname, port, "")
		chains = append(chains, &listenerv3.FilterChain{
			FilterChainMatch: &listenerv3.FilterChainMatch{ServerNames: []string{sp.svc.Hostname}},
			Filters:          []*listenerv3.Filter{b.tcpProxyTo(policy.ClientSide, cluster)},
		})
	}
	name := OutboundListenerName("0.0.0.0", port)
	l := listener(name, "0.0.0.0", port, false, corev3.TrafficDirection_OUTBOUND)
	l.ListenerFilters = []*listenerv3.ListenerFilter{b.tlsInspector}
	l.FilterChains = chains
	l.DefaultFilterChain = b.fallthroughChain()
	return l
}

// claim takes the server names not yet claimed on a listener, reporting
// the ones another config holds.
func (b *listenerBuilder) claim(claimed map[string]string, names []string, ref, field string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		if owner, taken := claimed[n]; taken {
			if owner != ref {
				b.problems.Addf(ref, field, "server name %s is already routed by %s on this port", n, owner)
			}
			continue
		}
		claimed[n] = ref
		out = append(out, n)
	}
	return out
}

// fallthroughChain takes outbound traffic no listener or chain knows:
// passed through under ALLOW_ANY, dropped under REGISTRY_ONLY.
func (b *listenerBuilder) fallthroughChain() *listenerv3.FilterChain {
	if b.v.AllowAny() {
		return &listenerv3.FilterChain{Name: "PassthroughFilterChain", Filters: []*listenerv3.Filter{b.tcpProxyTo(policy.ClientSide, build.PassthroughCluster)}}
	}
	return &listenerv3.FilterChain{Name: "BlackHoleFilterChain", Filters: []*listenerv3.Filter{b.tcpProxyTo(policy.ClientSide, build.BlackHoleCluster)}}
}

// virtualOutbound adds the listener iptables redirects outbound traffic
// to.
func (b *listenerBuilder) virtualOutbound() {
	l := listener(VirtualOutboundListener, "0.0.0.0", VirtualOutboundPort, true, corev3.TrafficDirection_OUTBOUND)
	l.UseOriginalDst = wrapperspb.Bool(true)
	l.DefaultFilterChain = b.fallthroughChain()
	b.add(l)
}
