package mesh

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/navemesh/nave/shared/meshconfig"
	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
)

// gatewayService is the registry Service of an east-west gateway: port
// 15443 (and 15021), labels as given, reachable at external.
func gatewayService(t testing.TB, name string, labels map[string]string, external ...string) *meshconfig.Object {
	return registryObject(t, "Service", name, "istio-system", labels, &meshconfigv1.Service{
		Hostname: name + ".istio-system.svc.cluster.local", ExternalAddresses: external,
		Ports: []*meshconfigv1.ServicePort{{Name: "status", Number: 15021, Protocol: "HTTP"}, {Name: "tls", Number: 15443, Protocol: "TLS"}},
	})
}

func gatewayStrings(gws []NetworkGateway) string {
	var out []string
	for _, gw := range gws {
		out = append(out, fmt.Sprintf("%s %s:%d %s %s", gw.Network, gw.Address, gw.Port, gw.Cluster, gw.Source))
	}
	return strings.Join(out, "\n")
}

// TestNetworkGateways: gateways come from labelled Services (at their
// external addresses, on their gateway port), from WorkloadEntries that
// carry both gateway labels, and from MeshNetworks (addresses, and
// registryServiceName in a cluster the network lists fromRegistry); host
// names and bad labels are reported, not used.
func TestNetworkGateways(t *testing.T) {
	c1 := []*meshconfig.Object{
		gatewayService(t, "eastwest", map[string]string{NetworkLabel: "net-1"}, "203.0.113.1", "gw.example.com"),
		gatewayService(t, "custom-port", map[string]string{NetworkLabel: "net-1", GatewayPortLabel: "15021"}, "203.0.113.2"),
		gatewayService(t, "wrong-port", map[string]string{NetworkLabel: "net-1", GatewayPortLabel: "8443"}, "203.0.113.3"),
		gatewayService(t, "no-address", map[string]string{NetworkLabel: "net-1"}),
		gatewayService(t, "plain", nil, "203.0.113.4"),
	}
	c1 = append(c1, decode(t, `apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata:
  name: vm-gateway
  namespace: istio-system
  labels: {topology.istio.io/network: vm-net, networking.istio.io/gatewayPort: "15443"}
spec: {address: 198.51.100.7, locality: r1/z1}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-workload, namespace: shop, labels: {topology.istio.io/network: vm-net}}
spec: {address: 198.51.100.8}
`)...)
	c2 := []*meshconfig.Object{gatewayService(t, "registry-gw", nil, "203.0.113.9")}
	mn := &meshv1alpha1.MeshNetworks{Networks: map[string]*meshv1alpha1.Network{
		"net-2": {
			Endpoints: []*meshv1alpha1.Network_NetworkEndpoints{{Ne: &meshv1alpha1.Network_NetworkEndpoints_FromRegistry{FromRegistry: "c2"}}},
			Gateways: []*meshv1alpha1.Network_IstioNetworkGateway{
				{Gw: &meshv1alpha1.Network_IstioNetworkGateway_RegistryServiceName{RegistryServiceName: "registry-gw.istio-system.svc.cluster.local"}, Port: 15443},
				{Gw: &meshv1alpha1.Network_IstioNetworkGateway_Address{Address: "192.0.2.50"}, Port: 15443, Locality: "r2"},
				{Gw: &meshv1alpha1.Network_IstioNetworkGateway_Address{Address: "gw2.example.com"}, Port: 15443},
			},
		},
	}}
	s := (&Builder{MeshNetworks: mn}).Build("m", []ClusterInput{{Name: "c1", Objects: c1}, {Name: "c2", Objects: c2}})
	want := strings.Join([]string{
		"net-1 203.0.113.1:15443 c1 c1:Service istio-system/eastwest",
		"net-1 203.0.113.2:15021 c1 c1:Service istio-system/custom-port",
		"net-2 192.0.2.50:15443  meshNetworks networks.net-2.gateways[1]",
		"net-2 203.0.113.9:15443 c2 c2:Service istio-system/registry-gw",
		"vm-net 198.51.100.7:15443 c1 c1:WorkloadEntry istio-system/vm-gateway",
	}, "\n")
	if got := gatewayStrings(s.NetworkGateways); got != want {
		t.Errorf("gateways:\n%s\nwant:\n%s", got, want)
	}
	var problems []string
	for _, p := range s.Problems {
		problems = append(problems, p.Resource+" "+p.Field)
	}
	slices.Sort(problems)
	wantProblems := []string{
		"c1:Service istio-system/eastwest status.loadBalancer.ingress",
		"c1:Service istio-system/wrong-port spec.ports",
		"meshNetworks networks.net-2.gateways[2].address",
	}
	if !slices.Equal(problems, wantProblems) {
		t.Errorf("problems = %q, want %q", problems, wantProblems)
	}
	if got := s.GatewaysFor("net-2", "c2"); gatewayStrings(got) != "net-2 203.0.113.9:15443 c2 c2:Service istio-system/registry-gw" {
		t.Errorf("GatewaysFor(net-2, c2) = %s; want the cluster's own gateway", gatewayStrings(got))
	}
	if got := s.GatewaysFor("net-2", "c9"); len(got) != 2 {
		t.Errorf("GatewaysFor(net-2, c9) = %s; want every gateway of the network", gatewayStrings(got))
	}
	// lcm of per-network (2, 2, 1) and per-network-and-cluster (2, 1, 1, 1) counts.
	if got := s.GatewayWeightScale(); got != 2 {
		t.Errorf("GatewayWeightScale = %d, want 2", got)
	}
}

// TestNetworkOf: an endpoint's own network wins; else MeshNetworks'
// fromRegistry (its cluster), then fromCidr (its address).
func TestNetworkOf(t *testing.T) {
	mn := &meshv1alpha1.MeshNetworks{Networks: map[string]*meshv1alpha1.Network{
		"by-registry": {Endpoints: []*meshv1alpha1.Network_NetworkEndpoints{{Ne: &meshv1alpha1.Network_NetworkEndpoints_FromRegistry{FromRegistry: "c2"}}}},
		"by-cidr":     {Endpoints: []*meshv1alpha1.Network_NetworkEndpoints{{Ne: &meshv1alpha1.Network_NetworkEndpoints_FromCidr{FromCidr: "10.8.0.0/16"}}}},
	}}
	s := (&Builder{MeshNetworks: mn}).Build("m", nil)
	for _, tt := range []struct {
		ep   Endpoint
		want string
	}{
		{Endpoint{Address: "10.8.0.1", Cluster: "c2", Network: "own"}, "own"},
		{Endpoint{Address: "10.8.0.1", Cluster: "c2"}, "by-registry"},
		{Endpoint{Address: "10.8.0.1", Cluster: "c1"}, "by-cidr"},
		{Endpoint{Address: "10.9.0.1", Cluster: "c1"}, ""},
		{Endpoint{Address: "db.example.com", Cluster: "c1"}, ""},
	} {
		if got := s.NetworkOf(&tt.ep); got != tt.want {
			t.Errorf("NetworkOf(%+v) = %q, want %q", tt.ep, got, tt.want)
		}
	}
}

// TestDiffGatewayMoved: a gateway whose address changes is an endpoint
// change of the services with endpoints on its network (and only those),
// found by the incremental build for a WorkloadEntry gateway too.
func TestDiffGatewayMoved(t *testing.T) {
	const services = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: shop}
spec:
  hosts: [db.shop.svc.cluster.local]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 5432, name: pg, protocol: TCP}]
  endpoints: [{address: 10.1.0.1, network: net-b}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: web, namespace: shop}
spec:
  hosts: [web.shop.svc.cluster.local]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 80, name: http, protocol: HTTP}]
  endpoints: [{address: 10.2.0.1, network: net-c}]
`
	gateway := func(addr string) string {
		return "---\napiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: eastwest, namespace: istio-system, labels: {topology.istio.io/network: net-b, networking.istio.io/gatewayPort: \"15443\"}}\nspec: {address: " + addr + "}\n"
	}
	base := decode(t, services)
	b := new(Builder)
	prev := b.Build("m", []ClusterInput{{Name: "c1", Objects: append(slices.Clone(base), decode(t, gateway("192.0.2.1"))...)}})
	next := b.Build("m", []ClusterInput{{Name: "c1", Objects: append(slices.Clone(base), decode(t, gateway("192.0.2.2"))...)}})
	if got := gatewayStrings(next.NetworkGateways); got != "net-b 192.0.2.2:15443 c1 c1:WorkloadEntry istio-system/eastwest" {
		t.Fatalf("gateways after the move: %s", got)
	}
	full := Build("m", []ClusterInput{{Name: "c1", Objects: append(slices.Clone(base), decode(t, gateway("192.0.2.2"))...)}})
	if !slices.Equal(full.NetworkGateways, next.NetworkGateways) {
		t.Errorf("incremental gateways %v differ from a full build's %v", next.NetworkGateways, full.NetworkGateways)
	}
	d := DiffSnapshots(prev, next)
	if d.Config || !d.Hosts["db.shop.svc.cluster.local"] || d.Hosts["web.shop.svc.cluster.local"] {
		t.Errorf("diff = %+v; want an endpoint change of db (net-b) only", d)
	}

	// A Service gateway's external address moving: the same.
	svcPrev := Build("m", []ClusterInput{{Name: "c1", Objects: append(slices.Clone(base), gatewayService(t, "eastwest", map[string]string{NetworkLabel: "net-c"}, "203.0.113.1"))}})
	svcNext := Build("m", []ClusterInput{{Name: "c1", Objects: append(slices.Clone(base), gatewayService(t, "eastwest", map[string]string{NetworkLabel: "net-c"}, "203.0.113.2"))}})
	d = DiffSnapshots(svcPrev, svcNext)
	if d.Config || !d.Hosts["web.shop.svc.cluster.local"] || d.Hosts["db.shop.svc.cluster.local"] {
		t.Errorf("diff = %+v; want an endpoint change of web (net-c) only", d)
	}
	if st := svcNext.Networks(); len(st) != 2 || st[0].Network != "net-b" || st[0].Unreachable != 1 || st[1].Unreachable != 0 {
		t.Errorf("networks = %+v; want net-b's endpoint unreachable (no gateway), net-c's reachable", st)
	}
}
