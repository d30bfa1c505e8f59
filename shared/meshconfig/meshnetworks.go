package meshconfig

import (
	"fmt"
	"net/netip"
	"strings"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
)

// NetworkLabel is Istio's label that puts a workload (pod, WorkloadEntry),
// a namespace's workloads or a gateway Service on a network
// (docs/multi-network.md).
const NetworkLabel = "topology.istio.io/network"

// GatewayPortLabel is Istio's label of an east-west gateway Service that
// names the port other networks reach it at; 15443 without it.
const GatewayPortLabel = "networking.istio.io/gatewayPort"

// ParseMeshNetworks decodes an Istio MeshNetworks (istio.io/api
// mesh/v1alpha1, the YAML of Istio's `meshNetworks` ConfigMap key:
// `networks: {NAME: {endpoints: [...], gateways: [...]}}`) strictly: an
// unknown field or a value of the wrong type is an error naming the field
// (meshNetworks.…). An empty document is an empty MeshNetworks (no
// networks configured). It does not validate semantics:
// ValidateMeshNetworks does.
func ParseMeshNetworks(data []byte) (*meshv1alpha1.MeshNetworks, error) {
	nw := &meshv1alpha1.MeshNetworks{}
	if err := parseMeshMessage(data, "meshNetworks", nw); err != nil {
		return nil, err
	}
	return nw, nil
}

// ValidateMeshNetworks checks a MeshNetworks: every network name is a
// label value (it is what topology.istio.io/network says); each endpoint
// gives fromRegistry (a cluster name) or fromCidr (a CIDR); each gateway
// gives registryServiceName (a service's FQDN) or address (an IP or a
// host name), a port from 1 to 65535, and a locality of at most
// region/zone/subzone. The error names the first failing field
// (meshNetworks.networks[NAME].gateways[0].port).
func ValidateMeshNetworks(nw *meshv1alpha1.MeshNetworks) error {
	c := &checker{}
	p := path("meshNetworks").field("networks")
	for _, name := range sortedMapKeys(nw.GetNetworks()) {
		np := p.key(name)
		if name == "" {
			c.fail(np, "network name must not be empty")
		} else if reason := labelChars(name); reason != "" {
			c.fail(np, "network name %q %s (it is a topology.istio.io/network label value)", name, reason)
		}
		n := nw.GetNetworks()[name]
		for i, ep := range n.GetEndpoints() {
			ep2 := np.field("endpoints").index(i)
			switch ne := ep.GetNe().(type) {
			case *meshv1alpha1.Network_NetworkEndpoints_FromCidr:
				if _, err := netip.ParsePrefix(ne.FromCidr); err != nil {
					c.fail(ep2.field("fromCidr"), "%q is not a CIDR (10.1.0.0/16, fd00::/64)", ne.FromCidr)
				}
			case *meshv1alpha1.Network_NetworkEndpoints_FromRegistry:
				if reason := dns1123Label(ne.FromRegistry); reason != "" {
					c.fail(ep2.field("fromRegistry"), "cluster name %s", reason)
				}
			default:
				c.fail(ep2, "give fromRegistry (a cluster name) or fromCidr")
			}
		}
		for i, gw := range n.GetGateways() {
			gp := np.field("gateways").index(i)
			switch g := gw.GetGw().(type) {
			case *meshv1alpha1.Network_IstioNetworkGateway_RegistryServiceName:
				h := g.RegistryServiceName
				if reason := checkHost(h, hostRules{}); reason != "" || strings.HasPrefix(h, "*") {
					c.fail(gp.field("registryServiceName"), "%q is not a service's FQDN (name.namespace.svc.cluster.local)", h)
				} else if _, err := netip.ParseAddr(h); err == nil {
					c.fail(gp.field("registryServiceName"), "%q is an address: give it as address", h)
				}
			case *meshv1alpha1.Network_IstioNetworkGateway_Address:
				if reason := checkHost(g.Address, hostRules{}); reason != "" || strings.HasPrefix(g.Address, "*") {
					c.fail(gp.field("address"), "%q is neither an IP address nor a host name", g.Address)
				}
			default:
				c.fail(gp, "give registryServiceName or address")
			}
			if port := gw.GetPort(); port < 1 || port > 65535 {
				c.fail(gp.field("port"), "%d: want 1 to 65535", port)
			}
			if loc := gw.GetLocality(); loc != "" {
				parts := strings.Split(loc, "/")
				if len(parts) > 3 || strings.ContainsAny(loc, " \t\r\n") {
					c.fail(gp.field("locality"), "%q: want region, region/zone or region/zone/subzone", loc)
				}
				for _, part := range parts {
					if part == "" {
						c.fail(gp.field("locality"), "%q: empty part (want region/zone/subzone)", loc)
					}
				}
			}
		}
	}
	if c.err != nil {
		return fmt.Errorf("%s: %s", c.err.field, c.err.reason)
	}
	return nil
}
