package policy

import (
	"strconv"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/mesh"
)

// Cluster is one outbound cluster of a service — a port, optionally
// narrowed to a subset of the DestinationRule that applies to the host —
// with the traffic policy that applies to it. Envoy and proxyless gRPC
// generation both enumerate these (Clusters). A Cluster is a plain value,
// read-only once made.
type Cluster struct {
	// Name is the cluster's name (build.ClusterName).
	Name    string
	Service *mesh.Service
	Port    mesh.Port
	// Subset is the subset's name, "" for the whole port; SubsetIndex its
	// index in the rule's spec.subsets (-1 for the whole port), and Labels
	// its labels (nil for the whole port).
	Subset      string
	SubsetIndex int
	Labels      map[string]string
	// Rule is the DestinationRule that applies to the host, or nil.
	Rule *mesh.Config
	// Policy is the rule's traffic policy merged for the port and subset
	// (TrafficPolicyFor), with the mesh's localityLbSetting when it sets
	// none (MeshLocality); nil when none applies.
	Policy *networking.TrafficPolicy
	// MeshLocality is true when Policy's localityLbSetting is the
	// MeshConfig's default, not the rule's.
	MeshLocality bool
}

// Clusters calls fn for every outbound cluster of svc whose host rule dr
// applies to (nil: none): per port in order, the whole port, then each of
// dr's subsets in order (a name defined twice comes twice). A cluster
// whose policy sets no localityLbSetting takes the mesh's (s's MeshConfig
// localityLbSetting), as in Istio.
func Clusters(s *mesh.Snapshot, svc *mesh.Service, dr *mesh.Config, fn func(*Cluster)) {
	spec := dr.DestinationRule()
	meshLB := s.LocalityLbSetting()
	emit := func(c *Cluster) {
		if meshLB != nil && c.Policy.GetLoadBalancer().GetLocalityLbSetting() == nil {
			c.Policy, c.MeshLocality = withLocality(c.Policy, meshLB), true
		}
		fn(c)
	}
	for _, p := range svc.Ports {
		emit(&Cluster{Name: build.ClusterName(svc.Hostname, p.Number, ""), Service: svc, Port: p, SubsetIndex: -1, Rule: dr,
			Policy: TrafficPolicyFor(spec, p.Number, "")})
		for i, ss := range spec.GetSubsets() {
			emit(&Cluster{Name: build.ClusterName(svc.Hostname, p.Number, ss.GetName()), Service: svc, Port: p, Subset: ss.GetName(),
				SubsetIndex: i, Labels: ss.GetLabels(), Rule: dr, Policy: TrafficPolicyFor(spec, p.Number, ss.GetName())})
		}
	}
}

// withLocality returns p (which may be nil) with its load balancer's
// localityLbSetting set to lb; p itself is not modified.
func withLocality(p *networking.TrafficPolicy, lb *networking.LocalityLoadBalancerSetting) *networking.TrafficPolicy {
	out := &networking.TrafficPolicy{}
	if p != nil {
		out = proto.Clone(p).(*networking.TrafficPolicy)
	}
	if out.LoadBalancer == nil {
		out.LoadBalancer = &networking.LoadBalancerSettings{}
	}
	out.LoadBalancer.LocalityLbSetting = lb
	return out
}

// LocalityField names where c's localityLbSetting comes from, for
// problems: the rule's field, or "" for the MeshConfig's default, whose
// inapplicable parts (failover without the rule's outlierDetection) are
// not reported per cluster.
func (c *Cluster) LocalityField() (resource, field string) {
	if c.MeshLocality || c.Rule == nil {
		return "", ""
	}
	return c.Rule.Ref(), c.Field("loadBalancer") + ".localityLbSetting"
}

// Field names where part ("loadBalancer", "tls", ...) of c's policy was
// set, for problems (the package function Field).
func (c *Cluster) Field(part string) string {
	return Field(c.Rule.DestinationRule(), c.Port.Number, c.Subset, part)
}

// TrafficPolicyFor merges a DestinationRule's traffic policies for one
// port and subset, Istio's way: the subset's policy overrides the
// top-level one field by field (load balancer, connection pool, outlier
// detection, TLS as wholes), and within each, port-level settings for the
// port override the policy's own. Nil when dr is nil.
func TrafficPolicyFor(dr *networking.DestinationRule, port uint32, subset string) *networking.TrafficPolicy {
	if dr == nil {
		return nil
	}
	out := applyPortLevel(dr.GetTrafficPolicy(), port)
	if subset != "" {
		for _, ss := range dr.GetSubsets() {
			if ss.GetName() == subset && ss.GetTrafficPolicy() != nil {
				out = overlayPolicy(out, applyPortLevel(ss.GetTrafficPolicy(), port))
			}
		}
	}
	return out
}

// applyPortLevel returns p with the port-level settings for port applied.
func applyPortLevel(p *networking.TrafficPolicy, port uint32) *networking.TrafficPolicy {
	if p == nil {
		return nil
	}
	out := &networking.TrafficPolicy{
		LoadBalancer:     p.GetLoadBalancer(),
		ConnectionPool:   p.GetConnectionPool(),
		OutlierDetection: p.GetOutlierDetection(),
		Tls:              p.GetTls(),
		Tunnel:           p.GetTunnel(),
		ProxyProtocol:    p.GetProxyProtocol(),
	}
	for _, pl := range p.GetPortLevelSettings() {
		if pl.GetPort().GetNumber() != port {
			continue
		}
		if pl.GetLoadBalancer() != nil {
			out.LoadBalancer = pl.GetLoadBalancer()
		}
		if pl.GetConnectionPool() != nil {
			out.ConnectionPool = pl.GetConnectionPool()
		}
		if pl.GetOutlierDetection() != nil {
			out.OutlierDetection = pl.GetOutlierDetection()
		}
		if pl.GetTls() != nil {
			out.Tls = pl.GetTls()
		}
	}
	return out
}

// overlayPolicy returns base with every field over sets replaced.
func overlayPolicy(base, over *networking.TrafficPolicy) *networking.TrafficPolicy {
	if base == nil {
		return over
	}
	out := &networking.TrafficPolicy{
		LoadBalancer:     base.GetLoadBalancer(),
		ConnectionPool:   base.GetConnectionPool(),
		OutlierDetection: base.GetOutlierDetection(),
		Tls:              base.GetTls(),
		Tunnel:           base.GetTunnel(),
		ProxyProtocol:    base.GetProxyProtocol(),
	}
	if over.GetLoadBalancer() != nil {
		out.LoadBalancer = over.GetLoadBalancer()
	}
	if over.GetConnectionPool() != nil {
		out.ConnectionPool = over.GetConnectionPool()
	}
	if over.GetOutlierDetection() != nil {
		out.OutlierDetection = over.GetOutlierDetection()
	}
	if over.GetTls() != nil {
		out.Tls = over.GetTls()
	}
	if over.GetTunnel() != nil {
		out.Tunnel = over.GetTunnel()
	}
	if over.GetProxyProtocol() != nil {
		out.ProxyProtocol = over.GetProxyProtocol()
	}
	return out
}

// Field names where part ("loadBalancer", "tls", ...) of the traffic
// policy of dr for port and subset ("" for none) was set, for problems:
// the subset's policy wins over the top-level one, and a port-level
// setting over its policy's own.
func Field(dr *networking.DestinationRule, port uint32, subset, part string) string {
	where := func(p *networking.TrafficPolicy) (string, bool) {
		for j, pl := range p.GetPortLevelSettings() {
			if pl.GetPort().GetNumber() == port && policyHas(pl, part) {
				return ".portLevelSettings[" + strconv.Itoa(j) + "]", true
			}
		}
		return "", policyHas(p, part)
	}
	if subset != "" {
		for i, ss := range dr.GetSubsets() {
			if ss.GetName() == subset {
				if s, ok := where(ss.GetTrafficPolicy()); ok {
					return "spec.subsets[" + strconv.Itoa(i) + "].trafficPolicy" + s + "." + part
				}
			}
		}
	}
	s, _ := where(dr.GetTrafficPolicy())
	return "spec.trafficPolicy" + s + "." + part
}

// policyParts is what a traffic policy and its port-level settings both
// set.
type policyParts interface {
	GetLoadBalancer() *networking.LoadBalancerSettings
	GetConnectionPool() *networking.ConnectionPoolSettings
	GetOutlierDetection() *networking.OutlierDetection
	GetTls() *networking.ClientTLSSettings
}

// policyHas reports whether p (a *TrafficPolicy, or port-level settings,
// which have no tunnel or proxyProtocol) sets part.
func policyHas(p policyParts, part string) bool {
	switch part {
	case "loadBalancer":
		return p.GetLoadBalancer() != nil
	case "connectionPool":
		return p.GetConnectionPool() != nil
	case "outlierDetection":
		return p.GetOutlierDetection() != nil
	case "tls":
		return p.GetTls() != nil
	}
	tp, ok := p.(*networking.TrafficPolicy)
	switch {
	case !ok:
		return false
	case part == "tunnel":
		return tp.GetTunnel() != nil
	case part == "proxyProtocol":
		return tp.GetProxyProtocol() != nil
	}
	return false
}
