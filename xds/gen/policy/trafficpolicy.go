package policy

import (
	"strconv"

	networking "istio.io/api/networking/v1alpha3"
)

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
