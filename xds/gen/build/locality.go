package build

import (
	"maps"
	"slices"
	"sort"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
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

// Client is what locality load balancing reads of the client an
// assignment is built for: its locality, network and labels (Envoy's
// proxy key, or a proxyless client's node), and its cluster (the
// endpoints of cluster-local hosts, mesh.Snapshot.ClusterLocal). The zero
// Client knows none of them.
type Client struct {
	Locality mesh.Locality
	Network  string
	Labels   map[string]string
	Cluster  string
}

// ClusterLocalEndpoints narrows eps of host to those of the client's
// cluster when the mesh makes host cluster-local (none for a client whose
// cluster is unknown: such endpoints never leave their cluster); eps
// itself otherwise. eps is not modified.
func ClusterLocalEndpoints(s *mesh.Snapshot, host, cluster string, eps []*mesh.Endpoint) []*mesh.Endpoint {
	if !s.ClusterLocal(host) {
		return eps
	}
	out := make([]*mesh.Endpoint, 0, len(eps))
	for _, ep := range eps {
		if cluster != "" && ep.Cluster == cluster {
			out = append(out, ep)
		}
	}
	return out
}

// LocalityLB is how one client balances a cluster's localities:
// Distribution sets locality weights (Distribute), Priority orders
// localities for failover; both nil: every locality at priority 0.
type LocalityLB struct {
	Distribution *networking.LocalityLoadBalancerSetting_Distribute
	Priority     func(*mesh.Endpoint) uint32
}

// LocalityIndependent reports whether no locality load balancing applies
// under traffic policy p: no distribution, no failover settings and no
// outlier detection (which turns on failover by proximity), or the
// setting is off. An assignment is then the same for every client.
func LocalityIndependent(p *networking.TrafficPolicy) bool {
	s, on := LocalitySetting(p)
	return !on || len(s.GetDistribute()) == 0 && len(s.GetFailover()) == 0 && len(s.GetFailoverPriority()) == 0 && p.GetOutlierDetection() == nil
}

// LocalityLBFor is the locality load balancing traffic policy p gives
// client c, as Istio applies localityLbSetting for Envoy and proxyless
// clients alike. Settings that cannot apply are recorded in problems,
// where naming the DestinationRule and the setting's field
// (….loadBalancer.localityLbSetting); it is called only then, and a
// resource "" reports nothing (a mesh-wide default).
//
// Distribution: the first distribute entry whose from matches the
// client's locality; it excludes failover.
//
// As in Istio, failover applies only when the policy has outlier
// detection: without it a local endpoint is never seen as unhealthy
// (beyond health status), so traffic would never fail over and the
// priorities would only hide endpoints. failover / failoverPriority
// without outlierDetection are reported and ignored; with it and nothing
// configured, endpoints are prioritized by proximity to the client.
//
// By proximity (the client's locality must be known): same
// region/zone/subzone first, then same region/zone, then same region,
// then the regions named by failover entries from the client's region (in
// order), then the rest.
//
// By failoverPriority (a list of label names, or "name=value"): an
// endpoint matching the client on the first n labels and not the n+1th
// has priority len(list)-n. The topology labels (LabelRegion, LabelZone,
// LabelSubzone, LabelNetwork) compare localities and networks. When both
// are set, failoverPriority applies alone and the failover list is
// reported as ignored.
func LocalityLBFor(p *networking.TrafficPolicy, c Client, problems *Problems, where func() (resource, field string)) LocalityLB {
	s, on := LocalitySetting(p)
	if !on {
		return LocalityLB{}
	}
	if d := DistributionFor(p, c.Locality); d != nil {
		return LocalityLB{Distribution: d}
	}
	if p.GetOutlierDetection() == nil {
		if len(s.GetFailover()) > 0 || len(s.GetFailoverPriority()) > 0 {
			if resource, field := where(); resource != "" {
				problems.Addf(resource, field, "locality failover needs outlierDetection in the same traffic policy; ignored")
			}
		}
		return LocalityLB{}
	}
	if keys := s.GetFailoverPriority(); len(keys) > 0 {
		if resource, field := where(); len(s.GetFailover()) > 0 && resource != "" {
			problems.Addf(resource, field+".failover", "failover together with failoverPriority is not supported; failoverPriority applies alone")
		}
		return LocalityLB{Priority: LabelPriorities(ResolvePriorityLabels(keys, c))}
	}
	loc := c.Locality
	if loc.Region == "" {
		return LocalityLB{}
	}
	var targets []string
	for _, f := range s.GetFailover() {
		if f.GetFrom() == loc.Region && !slices.Contains(targets, f.GetTo()) {
			targets = append(targets, f.GetTo())
		}
	}
	rest := uint32(3 + len(targets))
	return LocalityLB{Priority: func(ep *mesh.Endpoint) uint32 {
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
	}}
}

// DistributionFor returns the distribute entry of p's localityLbSetting
// that a client in locality l takes: the first whose from matches l. Nil
// for none, or when locality load balancing is off.
func DistributionFor(p *networking.TrafficPolicy, l mesh.Locality) *networking.LocalityLoadBalancerSetting_Distribute {
	s, on := LocalitySetting(p)
	if !on {
		return nil
	}
	for _, d := range s.GetDistribute() {
		if LocalityMatches(d.GetFrom(), l) {
			return d
		}
	}
	return nil
}

// ResolvePriorityLabels resolves failoverPriority entries for client c:
// "name=value" as written, a bare name to the client's value (its
// locality or network for the topology labels, else its label; "" when
// unknown, which matches no endpoint).
func ResolvePriorityLabels(keys []string, c Client) []PriorityLabel {
	labels := make([]PriorityLabel, len(keys))
	for i, key := range keys {
		name, value, explicit := strings.Cut(key, "=")
		if !explicit {
			switch name {
			case LabelRegion:
				value = c.Locality.Region
			case LabelZone:
				value = c.Locality.Zone
			case LabelSubzone:
				value = c.Locality.Subzone
			case LabelNetwork:
				value = c.Network
			default:
				value = c.Labels[name]
			}
		}
		labels[i] = PriorityLabel{Name: name, Value: value}
	}
	return labels
}

// ClientReads is what of a client the locality load balancing of some
// traffic policies reads (LocalityLBFor): clients that agree on it get
// the same assignments.
type ClientReads struct {
	Locality bool
	Network  bool
	// Cluster is true when some hosts are cluster-local
	// (mesh.Snapshot.HasClusterLocal): their assignments read the
	// client's cluster.
	Cluster bool
	// Labels are the label names failoverPriority compares, sorted.
	Labels []string
}

// Add records what LocalityLBFor reads of a client under traffic policy
// p. It may say more than LocalityLBFor reads (never less).
func (r *ClientReads) Add(p *networking.TrafficPolicy) {
	if LocalityIndependent(p) {
		return
	}
	s, _ := LocalitySetting(p)
	if d := s.GetDistribute(); len(d) > 0 {
		if d[0].GetFrom() == "*" {
			return // every client takes the first entry
		}
		r.Locality = true
	}
	if p.GetOutlierDetection() == nil {
		return
	}
	keys := s.GetFailoverPriority()
	if len(keys) == 0 {
		r.Locality = true // by proximity, and failover from the client's region
		return
	}
	for _, key := range keys {
		name, _, explicit := strings.Cut(key, "=")
		switch {
		case explicit:
		case name == LabelRegion || name == LabelZone || name == LabelSubzone:
			r.Locality = true
		case name == LabelNetwork:
			r.Network = true
		default:
			if i, found := slices.BinarySearch(r.Labels, name); !found {
				r.Labels = slices.Insert(r.Labels, i, name)
			}
		}
	}
}

// Any reports whether anything of the client is read.
func (r ClientReads) Any() bool { return r.Locality || r.Network || len(r.Labels) > 0 }

// LocalityAssignment is Assignment with locality load balancing lb
// applied: its priorities, or its distribution's locality weights.
func LocalityAssignment(name string, p mesh.Port, eps []*mesh.Endpoint, lb LocalityLB, metadata func(*mesh.Endpoint) *corev3.Metadata) *endpointv3.ClusterLoadAssignment {
	cla := Assignment(name, p, eps, lb.Priority, metadata)
	if lb.Distribution != nil {
		Distribute(cla, lb.Distribution)
	}
	return cla
}
