package build

import (
	"cmp"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/navemesh/nave/xds/mesh"
)

// Assignment groups eps by (priority, locality). A locality's weight
// is the sum of its endpoints' weights (0 counts as 1); groups are sorted
// by priority, then region/zone/subzone, and priorities are renumbered
// 0..n-1 without gaps (Envoy requires contiguous priorities). priority
// may be nil (everything at priority 0); so may metadata (an endpoint's
// metadata, nil for none).
func Assignment(name string, p mesh.Port, eps []*mesh.Endpoint, priority func(*mesh.Endpoint) uint32, metadata func(*mesh.Endpoint) *corev3.Metadata) *endpointv3.ClusterLoadAssignment {
	type groupKey struct {
		priority uint32
		locality mesh.Locality
	}
	type group struct {
		groupKey
		lle *endpointv3.LocalityLbEndpoints
	}
	a := newEndpointArena(len(eps))
	// Few localities per cluster: a linear search beats a map.
	var groups []*group
	var last *group
	for _, ep := range eps {
		k := groupKey{locality: ep.Locality}
		if priority != nil {
			k.priority = priority(ep)
		}
		g := last
		if g == nil || g.groupKey != k {
			g = nil
			for _, h := range groups {
				if h.groupKey == k {
					g = h
					break
				}
			}
		}
		if g == nil {
			g = &group{groupKey: k, lle: &endpointv3.LocalityLbEndpoints{
				Locality:            &corev3.Locality{Region: ep.Locality.Region, Zone: ep.Locality.Zone, SubZone: ep.Locality.Subzone},
				LoadBalancingWeight: wrapperspb.UInt32(0),
			}}
			groups = append(groups, g)
		}
		last = g
		weight := ep.Weight
		if weight == 0 {
			weight = 1
		}
		lb := a.endpoint(ep.Address, ep.PortFor(p), healthStatus(ep.Health), weight)
		if metadata != nil {
			lb.Metadata = metadata(ep)
		}
		g.lle.LbEndpoints = append(g.lle.LbEndpoints, lb)
		g.lle.LoadBalancingWeight.Value += weight
	}
	slices.SortStableFunc(groups, func(a, b *group) int {
		if a.priority != b.priority {
			return cmp.Compare(a.priority, b.priority)
		}
		return cmp.Or(
			strings.Compare(a.locality.Region, b.locality.Region),
			strings.Compare(a.locality.Zone, b.locality.Zone),
			strings.Compare(a.locality.Subzone, b.locality.Subzone))
	})
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: make([]*endpointv3.LocalityLbEndpoints, 0, len(groups))}
	var next uint32
	for i, g := range groups {
		if i > 0 && g.priority != groups[i-1].priority {
			next++
		}
		g.lle.Priority = next
		cla.Endpoints = append(cla.Endpoints, g.lle)
	}
	return cla
}

// endpointArena allocates the messages of n endpoints in a few slices
// instead of eight allocations per endpoint. The messages live as long as
// the assignment that holds them, so nothing is retained longer.
type endpointArena struct {
	lb      []endpointv3.LbEndpoint
	host    []endpointv3.LbEndpoint_Endpoint
	ep      []endpointv3.Endpoint
	addr    []corev3.Address
	sockets []corev3.Address_SocketAddress
	sa      []corev3.SocketAddress
	port    []corev3.SocketAddress_PortValue
	weight  []wrapperspb.UInt32Value
	next    int
}

func newEndpointArena(n int) *endpointArena {
	return &endpointArena{
		lb:      make([]endpointv3.LbEndpoint, n),
		host:    make([]endpointv3.LbEndpoint_Endpoint, n),
		ep:      make([]endpointv3.Endpoint, n),
		addr:    make([]corev3.Address, n),
		sockets: make([]corev3.Address_SocketAddress, n),
		sa:      make([]corev3.SocketAddress, n),
		port:    make([]corev3.SocketAddress_PortValue, n),
		weight:  make([]wrapperspb.UInt32Value, n),
	}
}

// endpoint returns the next endpoint, set to address:port.
func (a *endpointArena) endpoint(address string, port uint32, health corev3.HealthStatus, weight uint32) *endpointv3.LbEndpoint {
	i := a.next
	a.next++
	a.port[i].PortValue = port
	a.sa[i].Address = address
	a.sa[i].PortSpecifier = &a.port[i]
	a.sockets[i].SocketAddress = &a.sa[i]
	a.addr[i].Address = &a.sockets[i]
	a.ep[i].Address = &a.addr[i]
	a.host[i].Endpoint = &a.ep[i]
	lb := &a.lb[i]
	lb.HostIdentifier = &a.host[i]
	lb.HealthStatus = health
	if weight != 1 {
		// Left out at 1, what Envoy (HostImplBase::weight: at least 1)
		// and grpc-go (parseEndpoints) take when it is unset: 4 bytes of
		// every endpoint of every assignment (decision 055).
		a.weight[i].Value = weight
		lb.LoadBalancingWeight = &a.weight[i]
	}
	return lb
}

func healthStatus(h mesh.Health) corev3.HealthStatus {
	switch h {
	case mesh.Unhealthy:
		return corev3.HealthStatus_UNHEALTHY
	case mesh.Terminating:
		return corev3.HealthStatus_DRAINING
	default:
		return corev3.HealthStatus_HEALTHY
	}
}
