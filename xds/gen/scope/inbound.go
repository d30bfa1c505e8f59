package scope

import (
	"slices"
	"strings"

	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// InboundPort is one port the proxy's own workload serves. It is a plain
// value.
type InboundPort struct {
	Service *mesh.Service
	// Port is the service port; TargetPort the workload port behind it.
	Port       mesh.Port
	TargetPort uint32
}

// InboundPorts returns the ports the proxy's own workload serves: every
// port of every service with an endpoint at one of the proxy's IPs that
// the endpoint serves, sorted by target port. Services need not be visible to the proxy.
func (v *View) InboundPorts() []InboundPort {
	if !v.inboundDone {
		v.inboundDone = true
		v.inbound = inboundPorts(v.snap, v.ips)
	}
	return v.inbound
}

// InboundPortsOf is View.InboundPorts for the workload at k's IPs, without
// scoping the rest of the snapshot.
func InboundPortsOf(s *mesh.Snapshot, k proxy.Key) []InboundPort {
	return inboundPorts(s, k.IPList())
}

func inboundPorts(s *mesh.Snapshot, ips []string) []InboundPort {
	if len(ips) == 0 {
		return nil
	}
	// The services with an endpoint at one of the IPs, in hostname order.
	var svcs []*mesh.Service
	for _, ip := range ips {
		for _, svc := range s.ServicesAt(ip) {
			if !slices.Contains(svcs, svc) {
				svcs = append(svcs, svc)
			}
		}
	}
	slices.SortFunc(svcs, func(a, b *mesh.Service) int { return strings.Compare(a.Hostname, b.Hostname) })
	seen := map[uint32]bool{}
	var out []InboundPort
	for _, svc := range svcs {
		for _, ep := range svc.Endpoints {
			if !slices.Contains(ips, ep.Address) {
				continue
			}
			for _, p := range svc.Ports {
				if !ep.Serves(p) {
					continue
				}
				tp := ep.PortFor(p)
				if seen[tp] {
					continue
				}
				seen[tp] = true
				out = append(out, InboundPort{Service: svc, Port: p, TargetPort: tp})
			}
		}
	}
	slices.SortFunc(out, func(a, b InboundPort) int { return int(a.TargetPort) - int(b.TargetPort) })
	return out
}
