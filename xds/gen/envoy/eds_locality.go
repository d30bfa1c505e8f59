package envoy

import (
	"slices"
	"strings"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/xds/gen/build"
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
// locality load balancing is on (build.LocalitySetting).
func localitySetting(oc *outboundCluster) (*networking.LocalityLoadBalancerSetting, bool) {
	return build.LocalitySetting(oc.Policy)
}

// distribution returns the localityLbSetting.distribute entry whose from
// matches the proxy's locality, or nil.
func (b *edsBuilder) distribution(oc *outboundCluster) *networking.LocalityLoadBalancerSetting_Distribute {
	s, on := localitySetting(oc)
	if !on {
		return nil
	}
	for _, d := range s.GetDistribute() {
		if build.LocalityMatches(d.GetFrom(), b.v.Key().Locality) {
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

func (b *edsBuilder) labelPriorities(keys []string) func(*mesh.Endpoint) uint32 {
	k := b.v.Key()
	labels := make([]build.PriorityLabel, len(keys))
	for i, key := range keys {
		name, value, explicit := strings.Cut(key, "=")
		if !explicit {
			switch name {
			case build.LabelRegion:
				value = k.Locality.Region
			case build.LabelZone:
				value = k.Locality.Zone
			case build.LabelSubzone:
				value = k.Locality.Subzone
			case build.LabelNetwork:
				value = k.Network
			default:
				value = b.v.Labels()[name]
			}
		}
		labels[i] = build.PriorityLabel{Name: name, Value: value}
	}
	return build.LabelPriorities(labels)
}
