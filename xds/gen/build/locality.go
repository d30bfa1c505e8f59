package build

import (
	"maps"
	"slices"
	"sort"
	"strings"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/xds/mesh"
)

// LocalitySetting is the localityLbSetting of a traffic policy, and
// whether locality load balancing is on (it is unless enabled: false; no
// setting means Istio's mesh default: on, with nothing configured).
func LocalitySetting(p *networking.TrafficPolicy) (*networking.LocalityLoadBalancerSetting, bool) {
	s := p.GetLoadBalancer().GetLocalityLbSetting()
	if e := s.GetEnabled(); e != nil && !e.GetValue() {
		return nil, false
	}
	return s, true
}

// Topology label names localityLbSetting.failoverPriority may use.
const (
	LabelRegion  = "topology.kubernetes.io/region"
	LabelZone    = "topology.kubernetes.io/zone"
	LabelSubzone = "topology.istio.io/subzone"
	LabelNetwork = "topology.istio.io/network"
)

// EndpointLabel is the value failoverPriority compares for label name on
// ep: its locality or network for the topology labels, else its label.
func EndpointLabel(ep *mesh.Endpoint, name string) string {
	switch name {
	case LabelRegion:
		return ep.Locality.Region
	case LabelZone:
		return ep.Locality.Zone
	case LabelSubzone:
		return ep.Locality.Subzone
	case LabelNetwork:
		return ep.Network
	}
	return ep.Labels[name]
}

// Distribute sets locality weights from a distribute entry: each locality
// takes the weight of the most specific `to` pattern it matches (longest,
// then alphabetical), shared among the localities that pattern matches in
// proportion to their endpoint counts. Localities no pattern matches get
// no traffic and are left out. Weights are scaled by 1000 so the shares
// stay close to exact.
func Distribute(cla *endpointv3.ClusterLoadAssignment, d *networking.LocalityLoadBalancerSetting_Distribute) {
	patterns := slices.Sorted(maps.Keys(d.GetTo()))
	sort.SliceStable(patterns, func(i, j int) bool { return len(patterns[i]) > len(patterns[j]) })
	match := make([]int, len(cla.Endpoints))
	counts := make([]uint64, len(patterns))
	for i, lle := range cla.Endpoints {
		l := lle.GetLocality()
		match[i] = -1
		for j, p := range patterns {
			if LocalityMatches(p, mesh.Locality{Region: l.GetRegion(), Zone: l.GetZone(), Subzone: l.GetSubZone()}) {
				match[i] = j
				counts[j] += uint64(len(lle.GetLbEndpoints()))
				break
			}
		}
	}
	kept := cla.Endpoints[:0]
	for i, lle := range cla.Endpoints {
		j := match[i]
		if j < 0 || d.GetTo()[patterns[j]] == 0 {
			continue
		}
		w := uint64(d.GetTo()[patterns[j]]) * 1000 * uint64(len(lle.GetLbEndpoints())) / counts[j]
		lle.LoadBalancingWeight = wrapperspb.UInt32(uint32(max(w, 1)))
		kept = append(kept, lle)
	}
	cla.Endpoints = kept
}

// LocalityMatches reports whether locality l matches pattern
// "region/zone/subzone", where "*" matches anything from its level down
// and a pattern naming fewer levels matches every locality below them.
func LocalityMatches(pattern string, l mesh.Locality) bool {
	vals := [3]string{l.Region, l.Zone, l.Subzone}
	for i, seg := range strings.SplitN(pattern, "/", 3) {
		if seg == "*" {
			return true
		}
		if seg != vals[i] {
			return false
		}
	}
	return true
}

// PriorityLabel is one resolved failoverPriority entry: a label name and
// the value an endpoint must have (the client's own, or the one the entry
// names; "" matches no endpoint).
type PriorityLabel struct{ Name, Value string }

// LabelPriorities prioritizes endpoints by failoverPriority: an endpoint
// matching the first n labels and not the n+1th has priority
// len(labels)-n.
func LabelPriorities(labels []PriorityLabel) func(*mesh.Endpoint) uint32 {
	return func(ep *mesh.Endpoint) uint32 {
		n := 0
		for _, l := range labels {
			if l.Value == "" || EndpointLabel(ep, l.Name) != l.Value {
				break
			}
			n++
		}
		return uint32(len(labels) - n)
	}
}
