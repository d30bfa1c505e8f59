package envoy

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

// localityIndependent reports whether no locality load balancing applies
// to the cluster: no distribution, no failover settings, and no outlier
// detection (which turns on failover by proximity), or the setting is off.
// Its assignment is then the same wherever the proxy is.
func localityIndependent(oc *outboundCluster) bool {
	s, on := localitySetting(oc)
	return !on || len(s.GetDistribute()) == 0 && len(s.GetFailover()) == 0 && len(s.GetFailoverPriority()) == 0 && oc.Policy.GetOutlierDetection() == nil
}

// localitySetting is the cluster's localityLbSetting, and whether
// locality load balancing is on (it is unless enabled: false; no setting
// means Istio's mesh default: on, with nothing configured).
func localitySetting(oc *outboundCluster) (*networking.LocalityLoadBalancerSetting, bool) {
	s := oc.Policy.GetLoadBalancer().GetLocalityLbSetting()
	if e := s.GetEnabled(); e != nil && !e.GetValue() {
		return nil, false
	}
	return s, true
}

// distribution returns the localityLbSetting.distribute entry whose from
// matches the proxy's locality, or nil.
func (b *edsBuilder) distribution(oc *outboundCluster) *networking.LocalityLoadBalancerSetting_Distribute {
	s, on := localitySetting(oc)
	if !on {
		return nil
	}
	for _, d := range s.GetDistribute() {
		if localityMatches(d.GetFrom(), b.v.Key().Locality) {
			return d
		}
	}
	return nil
}

// priorities returns how endpoints are prioritized for locality failover,
// or nil for "all at priority 0".
//
// As in Istio, failover applies only when the cluster has outlier
// detection: without it Envoy never sees a local endpoint as unhealthy
// (beyond health status), so traffic would never fail over and the
// priorities would only hide endpoints. failover / failoverPriority
// without outlierDetection are reported and ignored; with it and nothing
// configured, endpoints are prioritized by proximity to the proxy.
//
// By proximity (the proxy's locality must be known): same
// region/zone/subzone first, then same region/zone, then same region,
// then the regions named by failover entries from the proxy's region (in
// order), then the rest.
//
// By failoverPriority (a list of label names, or "name=value"): an
// endpoint matching the proxy on the first n labels and not the n+1th has
// priority len(list)-n. The topology labels (topology.kubernetes.io/region,
// topology.kubernetes.io/zone, topology.istio.io/subzone,
// topology.istio.io/network) compare localities and networks. When both
// are set, nave applies failoverPriority alone and reports the failover
// list as ignored.
func (b *edsBuilder) priorities(oc *outboundCluster) func(*mesh.Endpoint) uint32 {
	s, on := localitySetting(oc)
	if !on || b.distribution(oc) != nil {
		return nil
	}
	if oc.Policy.GetOutlierDetection() == nil {
		if len(s.GetFailover()) > 0 || len(s.GetFailoverPriority()) > 0 {
			b.problems.Addf(oc.Rule.Ref(), oc.Field("loadBalancer")+".localityLbSetting", "locality failover needs outlierDetection in the same traffic policy; ignored")
		}
		return nil
	}
	if keys := s.GetFailoverPriority(); len(keys) > 0 {
		if len(s.GetFailover()) > 0 {
			b.problems.Addf(oc.Rule.Ref(), oc.Field("loadBalancer")+".localityLbSetting.failover", "failover together with failoverPriority is not supported; failoverPriority applies alone")
		}
		return b.labelPriorities(keys)
	}
	loc := b.v.Key().Locality
	if loc.Region == "" {
		return nil
	}
	var targets []string
	for _, f := range s.GetFailover() {
		if f.GetFrom() == loc.Region && !slices.Contains(targets, f.GetTo()) {
			targets = append(targets, f.GetTo())
		}
	}
	rest := uint32(3 + len(targets))
	return func(ep *mesh.Endpoint) uint32 {
		l := ep.Locality
		switch {
		case l.Region != loc.Region:
			if i := slices.Index(targets, l.Region); i >= 0 {
				return uint32(3 + i)
			}
			return rest
		case l.Zone != loc.Zone:
			return 2
		case l.Subzone != loc.Subzone:
			return 1
		}
		return 0
	}
}

// Topology label names failoverPriority may use.
const (
	labelRegion  = "topology.kubernetes.io/region"
	labelZone    = "topology.kubernetes.io/zone"
	labelSubzone = "topology.istio.io/subzone"
	labelNetwork = "topology.istio.io/network"
)

func (b *edsBuilder) labelPriorities(keys []string) func(*mesh.Endpoint) uint32 {
	type want struct {
		label string
		value string // the proxy's value, or the one the entry names
	}
	k := b.v.Key()
	wants := make([]want, len(keys))
	for i, key := range keys {
		name, value, explicit := strings.Cut(key, "=")
		if !explicit {
			switch name {
			case labelRegion:
				value = k.Locality.Region
			case labelZone:
				value = k.Locality.Zone
			case labelSubzone:
				value = k.Locality.Subzone
			case labelNetwork:
				value = k.Network
			default:
				value = b.v.Labels()[name]
			}
		}
		wants[i] = want{label: name, value: value}
	}
	return func(ep *mesh.Endpoint) uint32 {
		n := 0
		for _, w := range wants {
			var got string
			switch w.label {
			case labelRegion:
				got = ep.Locality.Region
			case labelZone:
				got = ep.Locality.Zone
			case labelSubzone:
				got = ep.Locality.Subzone
			case labelNetwork:
				got = ep.Network
			default:
				got = ep.Labels[w.label]
			}
			if w.value == "" || got != w.value {
				break
			}
			n++
		}
		return uint32(len(wants) - n)
	}
}

// distribute sets locality weights from a distribute entry: each locality
// takes the weight of the most specific `to` pattern it matches (longest,
// then alphabetical), shared among the localities that pattern matches in
// proportion to their endpoint counts. Localities no pattern matches get
// no traffic and are left out. Weights are scaled by 1000 so the shares
// stay close to exact.
func distribute(cla *endpointv3.ClusterLoadAssignment, d *networking.LocalityLoadBalancerSetting_Distribute) {
	patterns := slices.Sorted(maps.Keys(d.GetTo()))
	sort.SliceStable(patterns, func(i, j int) bool { return len(patterns[i]) > len(patterns[j]) })
	match := make([]int, len(cla.Endpoints))
	counts := make([]uint64, len(patterns))
	for i, lle := range cla.Endpoints {
		l := lle.GetLocality()
		match[i] = -1
		for j, p := range patterns {
			if localityMatches(p, mesh.Locality{Region: l.GetRegion(), Zone: l.GetZone(), Subzone: l.GetSubZone()}) {
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

// localityMatches reports whether locality l matches pattern
// "region/zone/subzone", where "*" matches anything from its level down
// and a pattern naming fewer levels matches every locality below them.
func localityMatches(pattern string, l mesh.Locality) bool {
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
