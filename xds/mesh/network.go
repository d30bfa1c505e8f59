package mesh

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
)

// Labels that make a Service or a WorkloadEntry a network's gateway
// (Istio's names; docs/multi-network.md).
const (
	// NetworkLabel names the network a gateway Service (or WorkloadEntry)
	// is the entry point of.
	NetworkLabel = "topology.istio.io/network"
	// GatewayPortLabel is the port a gateway accepts mesh mTLS on
	// (AUTO_PASSTHROUGH); DefaultGatewayPort without it.
	GatewayPortLabel = "networking.istio.io/gatewayPort"
	// DefaultGatewayPort is Istio's east-west gateway port.
	DefaultGatewayPort = 15443
)

// NetworkGateway is one entry point of a network: proxies on other
// networks reach the network's endpoints through it, with mesh mTLS whose
// SNI names the destination cluster (the gateway's AUTO_PASSTHROUGH
// server routes by it). It is a plain value, safe to copy and compare;
// a snapshot's are never modified.
type NetworkGateway struct {
	Network string `json:"network"`
	// Address is an IP address: a gateway given by host name is reported
	// and left out (Snapshot.Problems), since an EDS endpoint must be an IP
	// and the hub does not resolve names (docs/decisions/044).
	Address  string   `json:"address"`
	Port     uint32   `json:"port"`
	Locality Locality `json:"locality"`
	// Cluster is the cluster the gateway was found in; empty for a
	// meshNetworks address gateway.
	Cluster string `json:"cluster,omitempty"`
	// Source names what made it a gateway ("cluster:Kind ns/name", or
	// "meshNetworks networks.NAME.gateways[i]").
	Source string `json:"source"`
}

func gatewayCompare(a, b NetworkGateway) int {
	return cmp.Or(cmp.Compare(a.Network, b.Network), cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Address, b.Address),
		cmp.Compare(a.Port, b.Port), cmp.Compare(a.Source, b.Source))
}

// networkIndex is the snapshot's gateways indexed for split-horizon EDS,
// and how meshNetworks assigns networks to endpoints that have none.
type networkIndex struct {
	byNetwork        map[string][]NetworkGateway
	byNetworkCluster map[[2]string][]NetworkGateway
	// scale is the least common multiple of the gateway counts per
	// network and per network and cluster (1 without gateways).
	scale uint32
	// fromRegistry maps a cluster to its meshNetworks network; fromCIDR
	// lists the meshNetworks CIDRs in network name order.
	fromRegistry map[string]string
	fromCIDR     []networkCIDR
}

type networkCIDR struct {
	prefix  netip.Prefix
	network string
}

// setNetworks indexes gateways (sorted here) and the snapshot's
// MeshNetworks endpoint rules.
func (s *Snapshot) setNetworks(gateways []NetworkGateway) {
	slices.SortFunc(gateways, gatewayCompare)
	gateways = slices.CompactFunc(gateways, func(a, b NetworkGateway) bool { return gatewayCompare(a, b) == 0 })
	s.NetworkGateways = gateways
	idx := &networkIndex{scale: 1}
	if len(gateways) > 0 {
		idx.byNetwork = map[string][]NetworkGateway{}
		idx.byNetworkCluster = map[[2]string][]NetworkGateway{}
		for _, gw := range gateways {
			idx.byNetwork[gw.Network] = append(idx.byNetwork[gw.Network], gw)
			k := [2]string{gw.Network, gw.Cluster}
			idx.byNetworkCluster[k] = append(idx.byNetworkCluster[k], gw)
		}
		for _, l := range idx.byNetwork {
			idx.scale = lcm(idx.scale, uint32(len(l)))
		}
		for _, l := range idx.byNetworkCluster {
			idx.scale = lcm(idx.scale, uint32(len(l)))
		}
	}
	for _, name := range sortedNetworks(s.MeshNetworks) {
		for _, ne := range s.MeshNetworks.GetNetworks()[name].GetEndpoints() {
			if c := ne.GetFromRegistry(); c != "" {
				if idx.fromRegistry == nil {
					idx.fromRegistry = map[string]string{}
				}
				if _, ok := idx.fromRegistry[c]; !ok {
					idx.fromRegistry[c] = name // the first network (by name) that lists the cluster
				}
			}
			if p, err := netip.ParsePrefix(ne.GetFromCidr()); err == nil {
				idx.fromCIDR = append(idx.fromCIDR, networkCIDR{p.Masked(), name})
			}
		}
	}
	s.networks = idx
}

func lcm(a, b uint32) uint32 {
	x, y := a, b
	for y != 0 {
		x, y = y, x%y
	}
	return a / x * b
}

func sortedNetworks(mn *meshv1alpha1.MeshNetworks) []string {
	names := make([]string, 0, len(mn.GetNetworks()))
	for name := range mn.GetNetworks() {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// NetworkOf is the network of ep, as Istio resolves it: the endpoint's
// own (its spoke resolved the workload's label, its namespace's, the
// cluster's configured network), else the meshNetworks network whose
// endpoints list fromRegistry its cluster, else the first (by network
// name) whose fromCidr holds its address; "" when none says.
func (s *Snapshot) NetworkOf(ep *Endpoint) string {
	if ep.Network != "" || s.networks == nil {
		return ep.Network
	}
	if n, ok := s.networks.fromRegistry[ep.Cluster]; ok {
		return n
	}
	if len(s.networks.fromCIDR) > 0 {
		if a, err := netip.ParseAddr(ep.Address); err == nil {
			a = a.Unmap()
			for _, c := range s.networks.fromCIDR {
				if c.prefix.Contains(a) {
					return c.network
				}
			}
		}
	}
	return ""
}

// OtherNetwork reports whether ep is on another network than network (a
// proxy's): both known and different. Such an endpoint is never reached
// directly. A proxy of no network is everyone's: nothing is resolved then.
func (s *Snapshot) OtherNetwork(ep *Endpoint, network string) bool {
	if network == "" {
		return false
	}
	n := s.NetworkOf(ep)
	return n != "" && n != network
}

// MultiNetwork reports whether the mesh has network gateways: only then
// do proxies reach endpoints of other networks (split-horizon EDS).
func (s *Snapshot) MultiNetwork() bool { return len(s.NetworkGateways) > 0 }

// GatewaysFor are the gateways that lead to an endpoint of cluster on
// network (Istio's choice): those of that network found in that cluster,
// else every gateway of the network; nil when the network has none.
func (s *Snapshot) GatewaysFor(network, cluster string) []NetworkGateway {
	if s.networks == nil || s.networks.byNetwork == nil {
		return nil
	}
	if gws := s.networks.byNetworkCluster[[2]string{network, cluster}]; len(gws) > 0 {
		return gws
	}
	return s.networks.byNetwork[network]
}

// GatewayWeightScale is the factor every endpoint weight is multiplied
// by in split-horizon EDS, so that an endpoint's weight divides evenly
// among the gateways that lead to it: the least common multiple of the
// gateway counts per network and per network and cluster; 1 without
// gateways.
func (s *Snapshot) GatewayWeightScale() uint32 {
	if s.networks == nil {
		return 1
	}
	return s.networks.scale
}

// NetworkStatus is one network of the mesh as a snapshot sees it: its
// gateways, its endpoints, and how many of them proxies on other networks
// cannot reach (the network has no gateway). A snapshot's are shared
// and must not be modified.
type NetworkStatus struct {
	Network     string           `json:"network"`
	Gateways    []NetworkGateway `json:"gateways,omitempty"`
	Endpoints   int              `json:"endpoints"`
	Unreachable int              `json:"unreachableEndpoints"`
}

// Networks summarizes the snapshot's networks, sorted by name: every
// network an endpoint or gateway names. Endpoints without a network are
// left out (they are everyone's). A network's endpoints are unreachable
// from other networks when it has no gateway and the mesh has more than
// one network. Computed once per snapshot.
func (s *Snapshot) Networks() []NetworkStatus {
	return s.Memo(networksKey{}, func() any {
		byName := map[string]*NetworkStatus{}
		get := func(n string) *NetworkStatus {
			st := byName[n]
			if st == nil {
				st = &NetworkStatus{Network: n}
				byName[n] = st
			}
			return st
		}
		for _, gw := range s.NetworkGateways {
			st := get(gw.Network)
			st.Gateways = append(st.Gateways, gw)
		}
		for _, svc := range s.SortedServices() {
			for _, ep := range svc.Endpoints {
				if n := s.NetworkOf(ep); n != "" {
					get(n).Endpoints++
				}
			}
		}
		out := make([]NetworkStatus, 0, len(byName))
		for _, st := range byName {
			if len(st.Gateways) == 0 && len(byName) > 1 {
				st.Unreachable = st.Endpoints
			}
			out = append(out, *st)
		}
		slices.SortFunc(out, func(a, b NetworkStatus) int { return cmp.Compare(a.Network, b.Network) })
		return out
	}).([]NetworkStatus)
}

type networksKey struct{}

// serviceGateways are the gateways a registry Service makes (Istio's
// rules): labelled topology.istio.io/network, it is that network's
// gateway at each of its external addresses, on the port its
// networking.istio.io/gatewayPort label names (DefaultGatewayPort
// without), which the Service must have; else, when meshNetworks names
// its hostname as a registryServiceName gateway of a network whose
// endpoints list its cluster fromRegistry, it is that network's gateway
// at the configured port. Host name addresses are reported and left out.
func (s *Snapshot) serviceGateways(c *Config, rs *meshconfigv1.Service) []NetworkGateway {
	addrs := rs.GetExternalAddresses()
	if len(addrs) == 0 {
		return nil
	}
	type gw struct {
		network string
		port    uint32
	}
	var found []gw
	if nw := c.Object.Labels[NetworkLabel]; nw != "" {
		port := uint32(DefaultGatewayPort)
		if v, ok := c.Object.Labels[GatewayPortLabel]; ok {
			p, err := strconv.ParseUint(v, 10, 16)
			if err != nil || p == 0 {
				s.Problems = append(s.Problems, Problem{Resource: c.Ref(), Field: "metadata.labels[" + GatewayPortLabel + "]",
					Reason: fmt.Sprintf("%q is not a port number; the gateway is not used", v)})
				return nil
			}
			port = uint32(p)
		}
		if !slices.ContainsFunc(rs.GetPorts(), func(p *meshconfigv1.ServicePort) bool { return p.GetNumber() == port }) {
			s.Problems = append(s.Problems, Problem{Resource: c.Ref(), Field: "spec.ports",
				Reason: fmt.Sprintf("the Service is labelled %s=%s but has no port %d (its gateway port); it is not a gateway", NetworkLabel, nw, port)})
			return nil
		}
		found = append(found, gw{nw, port})
	} else {
		for _, name := range sortedNetworks(s.MeshNetworks) {
			n := s.MeshNetworks.GetNetworks()[name]
			if !slices.ContainsFunc(n.GetEndpoints(), func(e *meshv1alpha1.Network_NetworkEndpoints) bool { return e.GetFromRegistry() == c.Cluster }) {
				continue
			}
			for _, g := range n.GetGateways() {
				if g.GetRegistryServiceName() == rs.GetHostname() {
					found = append(found, gw{name, g.GetPort()})
				}
			}
		}
	}
	var out []NetworkGateway
	for _, a := range addrs {
		if _, err := netip.ParseAddr(a); err != nil {
			s.Problems = append(s.Problems, Problem{Resource: c.Ref(), Field: "status.loadBalancer.ingress",
				Reason: fmt.Sprintf("gateway address %q is not an IP address; nave does not resolve gateway host names, so it is not used (give the load balancer an IP, or list the gateway's IP in meshNetworks)", a)})
			continue
		}
		for _, g := range found {
			out = append(out, NetworkGateway{Network: g.network, Address: a, Port: g.port, Cluster: c.Cluster, Source: c.Ref()})
		}
	}
	return out
}

// entryGateway is the gateway a WorkloadEntry makes: one labelled both
// topology.istio.io/network and networking.istio.io/gatewayPort (the
// second is the opt-in: in Istio the network label alone places a
// workload on a network, and WorkloadEntries are never gateways) is that
// network's gateway at its address and that port, in its locality.
func entryGateway(c *Config) (NetworkGateway, *Problem, bool) {
	we, _ := c.Object.Spec.(*networking.WorkloadEntry)
	labels := mergeLabels(c.Object.Labels, we.GetLabels())
	nw, v := labels[NetworkLabel], labels[GatewayPortLabel]
	if nw == "" || v == "" {
		return NetworkGateway{}, nil, false
	}
	p, err := strconv.ParseUint(v, 10, 16)
	if err != nil || p == 0 {
		return NetworkGateway{}, &Problem{Resource: c.Ref(), Field: "metadata.labels[" + GatewayPortLabel + "]",
			Reason: fmt.Sprintf("%q is not a port number; the WorkloadEntry is not a gateway", v)}, false
	}
	if _, err := netip.ParseAddr(we.GetAddress()); err != nil {
		return NetworkGateway{}, &Problem{Resource: c.Ref(), Field: "spec.address",
			Reason: fmt.Sprintf("gateway address %q is not an IP address; nave does not resolve gateway host names, so it is not used", we.GetAddress())}, false
	}
	return NetworkGateway{Network: nw, Address: we.GetAddress(), Port: uint32(p), Locality: ParseLocality(we.GetLocality()),
		Cluster: c.Cluster, Source: c.Ref()}, nil, true
}

// meshNetworksGateways are the meshNetworks gateways given by address.
func (s *Snapshot) meshNetworksGateways() []NetworkGateway {
	var out []NetworkGateway
	for _, name := range sortedNetworks(s.MeshNetworks) {
		for i, g := range s.MeshNetworks.GetNetworks()[name].GetGateways() {
			a := g.GetAddress()
			if a == "" {
				continue // registryServiceName: found with the Service (serviceGateways)
			}
			field := "networks." + name + ".gateways[" + strconv.Itoa(i) + "]"
			if _, err := netip.ParseAddr(a); err != nil {
				s.Problems = append(s.Problems, Problem{Resource: "meshNetworks", Field: field + ".address",
					Reason: fmt.Sprintf("gateway address %q is not an IP address; nave does not resolve gateway host names, so it is not used", a)})
				continue
			}
			out = append(out, NetworkGateway{Network: name, Address: a, Port: g.GetPort(), Locality: ParseLocality(g.GetLocality()),
				Source: "meshNetworks " + field})
		}
	}
	return out
}

// gateways are the gateways of every registry Service, WorkloadEntry and
// MeshNetworks entry (problems go to s.Problems).
func (s *Snapshot) gateways(services, entries []*Config) []NetworkGateway {
	out := s.meshNetworksGateways()
	for _, c := range services {
		rs, _ := c.Object.Spec.(*meshconfigv1.Service)
		out = append(out, s.serviceGateways(c, rs)...)
	}
	for _, c := range entries {
		gw, problem, ok := entryGateway(c)
		if problem != nil {
			s.Problems = append(s.Problems, *problem)
		}
		if ok {
			out = append(out, gw)
		}
	}
	return out
}
