package meshconfig

import (
	"net/netip"
	"strings"

	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
)

func validateDestinationRule(c *checker, p path, dr *networkingv1alpha3.DestinationRule) {
	if dr.GetHost() == "" {
		c.fail(p.field("host"), "host is required")
	} else if reason := checkHost(dr.GetHost(), hostRules{}); reason != "" {
		c.fail(p.field("host"), "%s", reason)
	}
	validateTrafficPolicy(c, p.field("trafficPolicy"), dr.GetTrafficPolicy())
	seen := map[string]int{}
	for i, s := range dr.GetSubsets() {
		sp := p.field("subsets").index(i)
		if s.GetName() == "" {
			c.fail(sp.field("name"), "subset name is required")
		} else if reason := dns1123Label(s.GetName()); reason != "" {
			c.fail(sp.field("name"), "subset name %s", reason)
		} else if first, dup := seen[s.GetName()]; dup {
			c.fail(sp.field("name"), "subset %q is already defined at subsets[%d]", s.GetName(), first)
		} else {
			seen[s.GetName()] = i
		}
		if len(s.GetLabels()) == 0 {
			c.fail(sp.field("labels"), "subset labels are required")
		}
		checkLabels(c, sp.field("labels"), s.GetLabels())
		validateTrafficPolicy(c, sp.field("trafficPolicy"), s.GetTrafficPolicy())
	}
	validateSelector(c, p.field("workloadSelector").field("matchLabels"), dr.GetWorkloadSelector().GetMatchLabels())
}

func validateTrafficPolicy(c *checker, p path, tp *networkingv1alpha3.TrafficPolicy) {
	seen := map[uint32]int{}
	for i, pl := range tp.GetPortLevelSettings() {
		pp := p.field("portLevelSettings").index(i).field("port").field("number")
		n := pl.GetPort().GetNumber()
		checkPort(c, pp, n)
		if first, dup := seen[n]; dup {
			c.fail(pp, "port %d already has settings at portLevelSettings[%d]", n, first)
		}
		seen[n] = i
	}
}

func validateGateway(c *checker, p path, gw *networkingv1alpha3.Gateway) {
	if len(gw.GetServers()) == 0 {
		c.fail(p.field("servers"), "at least one server is required")
	}
	for i, s := range gw.GetServers() {
		sp := p.field("servers").index(i)
		if s.GetPort() == nil {
			c.fail(sp.field("port"), "port is required")
		}
		checkPort(c, sp.field("port").field("number"), s.GetPort().GetNumber())
		if s.GetPort().GetProtocol() == "" {
			c.fail(sp.field("port").field("protocol"), "protocol is required")
		}
		if len(s.GetHosts()) == 0 {
			c.fail(sp.field("hosts"), "at least one host is required")
		}
		for j, h := range s.GetHosts() {
			if reason := checkNamespacedHost(h, false, false); reason != "" {
				c.fail(sp.field("hosts").index(j), "%s", reason)
			}
		}
		tls := s.GetTls()
		switch tls.GetMode() {
		case networkingv1alpha3.ServerTLSSettings_SIMPLE, networkingv1alpha3.ServerTLSSettings_MUTUAL:
			if tls.GetCredentialName() == "" && len(tls.GetCredentialNames()) == 0 &&
				tls.GetServerCertificate() == "" && len(tls.GetTlsCertificates()) == 0 {
				c.fail(sp.field("tls"), "TLS mode %s requires credentialName or serverCertificate", tls.GetMode())
			}
		}
	}
	validateSelector(c, p.field("selector"), gw.GetSelector())
}

func validateServiceEntry(c *checker, p path, se *networkingv1alpha3.ServiceEntry) {
	if len(se.GetHosts()) == 0 {
		c.fail(p.field("hosts"), "at least one host is required")
	}
	for i, h := range se.GetHosts() {
		if reason := checkHost(h, hostRules{}); reason != "" {
			c.fail(p.field("hosts").index(i), "%s", reason)
		}
	}
	if len(se.GetPorts()) == 0 {
		c.fail(p.field("ports"), "at least one port is required")
	}
	names := map[string]int{}
	for i, port := range se.GetPorts() {
		pp := p.field("ports").index(i)
		checkPort(c, pp.field("number"), port.GetNumber())
		if t := port.GetTargetPort(); t != 0 {
			checkPort(c, pp.field("targetPort"), t)
		}
		switch first, dup := names[port.GetName()]; {
		case port.GetName() == "":
			c.fail(pp.field("name"), "port name is required")
		case dup:
			c.fail(pp.field("name"), "port name %q is already used by ports[%d]", port.GetName(), first)
		default:
			names[port.GetName()] = i
		}
	}
	if se.GetWorkloadSelector() != nil && len(se.GetEndpoints()) > 0 {
		c.fail(p.field("endpoints"), "endpoints and workloadSelector are mutually exclusive")
	}
	validateSelector(c, p.field("workloadSelector").field("labels"), se.GetWorkloadSelector().GetLabels())
	resolution := se.GetResolution()
	if resolution == networkingv1alpha3.ServiceEntry_NONE && len(se.GetEndpoints()) > 0 {
		c.fail(p.field("endpoints"), "resolution NONE takes no endpoints")
	}
	for i, ep := range se.GetEndpoints() {
		epp := p.field("endpoints").index(i)
		validateWorkloadEntry(c, epp, ep, true)
		if resolution == networkingv1alpha3.ServiceEntry_STATIC && !isIPOrUnix(ep.GetAddress()) {
			c.fail(epp.field("address"), "address %q must be an IP address or unix:// path with resolution STATIC", ep.GetAddress())
		}
		for _, name := range sortedMapKeys(ep.GetPorts()) {
			if _, ok := names[name]; !ok {
				c.fail(epp.field("ports").key(name), "port %q is not one of the service entry's port names", name)
			}
		}
	}
}

func isIPOrUnix(addr string) bool {
	if strings.HasPrefix(addr, "unix://") {
		return len(addr) > len("unix://")
	}
	_, err := netip.ParseAddr(addr)
	return err == nil
}

// validateWorkloadEntry checks a WorkloadEntry, on its own, in a service
// entry's endpoints, or as a workload group's template (no address then).
func validateWorkloadEntry(c *checker, p path, we *networkingv1alpha3.WorkloadEntry, needAddress bool) {
	addr := we.GetAddress()
	switch {
	case addr == "":
		if needAddress {
			c.fail(p.field("address"), "address is required")
		}
	case strings.HasPrefix(addr, "unix://"):
		if addr == "unix://" {
			c.fail(p.field("address"), "unix address needs a path")
		}
	default:
		if _, err := netip.ParseAddr(addr); err != nil {
			if reason := checkHost(addr, hostRules{}); reason != "" || strings.HasPrefix(addr, "*") {
				c.fail(p.field("address"), "address %q is neither an IP address nor a host name", addr)
			}
		}
	}
	for _, name := range sortedMapKeys(we.GetPorts()) {
		checkPort(c, p.field("ports").key(name), we.GetPorts()[name])
	}
	checkLabels(c, p.field("labels"), we.GetLabels())
	if l := we.GetLocality(); l != "" {
		if parts := strings.Split(l, "/"); len(parts) > 3 {
			c.fail(p.field("locality"), "locality %q has %d parts, want at most 3 (region/zone/subzone)", l, len(parts))
		}
	}
	// weight is a uint32: decoding already refuses a negative one.
}

func validateWorkloadGroup(c *checker, p path, wg *networkingv1alpha3.WorkloadGroup) {
	if wg.GetTemplate() == nil {
		c.fail(p.field("template"), "template is required")
		return
	}
	validateWorkloadEntry(c, p.field("template"), wg.GetTemplate(), false)
	checkLabels(c, p.field("metadata").field("labels"), wg.GetMetadata().GetLabels())
}

func validateSidecar(c *checker, p path, sc *networkingv1alpha3.Sidecar) {
	for i, eg := range sc.GetEgress() {
		ep := p.field("egress").index(i)
		if len(eg.GetHosts()) == 0 {
			c.fail(ep.field("hosts"), "an egress listener needs at least one host")
		}
		for j, h := range eg.GetHosts() {
			if reason := checkNamespacedHost(h, true, true); reason != "" {
				c.fail(ep.field("hosts").index(j), "%s", reason)
			}
		}
		if eg.GetPort() != nil {
			checkPort(c, ep.field("port").field("number"), eg.GetPort().GetNumber())
		}
	}
	for i, in := range sc.GetIngress() {
		if in.GetPort() == nil {
			c.fail(p.field("ingress").index(i).field("port"), "port is required")
		}
		checkPort(c, p.field("ingress").index(i).field("port").field("number"), in.GetPort().GetNumber())
	}
	validateSelector(c, p.field("workloadSelector").field("labels"), sc.GetWorkloadSelector().GetLabels())
}

// validateSelector checks the labels of a workload selector.
func validateSelector(c *checker, p path, labels map[string]string) {
	checkLabels(c, p, labels)
}
