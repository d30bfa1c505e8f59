package meshconfig

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
)

func TestParseMeshNetworks(t *testing.T) {
	nw, err := ParseMeshNetworks([]byte(`
networks:
  net1:
    endpoints:
    - fromRegistry: cluster-1
    - fromCidr: 10.1.0.0/16
    gateways:
    - registryServiceName: eastwest.nave-system.svc.cluster.local
      port: 15443
  net2:
    gateways:
    - address: 192.0.2.10
      port: 15443
      locality: us-east/a
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := ValidateMeshNetworks(nw); err != nil {
		t.Fatal(err)
	}
	n1 := nw.GetNetworks()["net1"]
	if n1.GetEndpoints()[0].GetFromRegistry() != "cluster-1" || n1.GetEndpoints()[1].GetFromCidr() != "10.1.0.0/16" ||
		n1.GetGateways()[0].GetRegistryServiceName() != "eastwest.nave-system.svc.cluster.local" || n1.GetGateways()[0].GetPort() != 15443 {
		t.Fatalf("net1 = %v", n1)
	}
	if g := nw.GetNetworks()["net2"].GetGateways()[0]; g.GetAddress() != "192.0.2.10" || g.GetLocality() != "us-east/a" {
		t.Fatalf("net2 gateway = %v", g)
	}
	empty, err := ParseMeshNetworks([]byte("  \n"))
	if err != nil || len(empty.GetNetworks()) != 0 {
		t.Fatalf("empty document: %v, %v", empty, err)
	}
}

func TestParseMeshNetworksRefusesUnknownFields(t *testing.T) {
	for doc, want := range map[string]string{
		"networks:\n  net1:\n    gateway: []\n":                 "meshNetworks.networks",
		"network: {}\n":                                         "meshNetworks",
		"networks:\n  net1:\n    gateways:\n    - port: nope\n": "meshNetworks.networks",
		"networks: [1\n":                                        "meshNetworks: invalid YAML",
	} {
		_, err := ParseMeshNetworks([]byte(doc))
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%q: error %v, want one starting %q", doc, err, want)
		}
	}
}

func TestValidateMeshNetworks(t *testing.T) {
	gw := func(g *meshv1alpha1.Network_IstioNetworkGateway) *meshv1alpha1.MeshNetworks {
		return &meshv1alpha1.MeshNetworks{Networks: map[string]*meshv1alpha1.Network{"net1": {Gateways: []*meshv1alpha1.Network_IstioNetworkGateway{g}}}}
	}
	ep := func(e *meshv1alpha1.Network_NetworkEndpoints) *meshv1alpha1.MeshNetworks {
		return &meshv1alpha1.MeshNetworks{Networks: map[string]*meshv1alpha1.Network{"net1": {Endpoints: []*meshv1alpha1.Network_NetworkEndpoints{e}}}}
	}
	addr := func(a string, port uint32) *meshv1alpha1.Network_IstioNetworkGateway {
		return &meshv1alpha1.Network_IstioNetworkGateway{Gw: &meshv1alpha1.Network_IstioNetworkGateway_Address{Address: a}, Port: port}
	}
	for _, tc := range []struct {
		name  string
		nw    *meshv1alpha1.MeshNetworks
		field string // "" = valid
	}{
		{"nil", nil, ""},
		{"address IP", gw(addr("192.0.2.1", 15443)), ""},
		{"address host", gw(addr("gw.example.com", 15443)), ""},
		{"address bad", gw(addr("gw example", 15443)), "meshNetworks.networks[net1].gateways[0].address"},
		{"address wildcard", gw(addr("*.example.com", 15443)), "meshNetworks.networks[net1].gateways[0].address"},
		{"port 0", gw(addr("192.0.2.1", 0)), "meshNetworks.networks[net1].gateways[0].port"},
		{"port too big", gw(addr("192.0.2.1", 70000)), "meshNetworks.networks[net1].gateways[0].port"},
		{"no gateway", gw(&meshv1alpha1.Network_IstioNetworkGateway{Port: 15443}), "meshNetworks.networks[net1].gateways[0]"},
		{"registry service IP", gw(&meshv1alpha1.Network_IstioNetworkGateway{Gw: &meshv1alpha1.Network_IstioNetworkGateway_RegistryServiceName{RegistryServiceName: "10.0.0.1"}, Port: 15443}),
			"meshNetworks.networks[net1].gateways[0].registryServiceName"},
		{"registry service path", gw(&meshv1alpha1.Network_IstioNetworkGateway{Gw: &meshv1alpha1.Network_IstioNetworkGateway_RegistryServiceName{RegistryServiceName: "ns/gw"}, Port: 15443}),
			"meshNetworks.networks[net1].gateways[0].registryServiceName"},
		{"locality too deep", gw(&meshv1alpha1.Network_IstioNetworkGateway{Gw: &meshv1alpha1.Network_IstioNetworkGateway_Address{Address: "192.0.2.1"}, Port: 1, Locality: "a/b/c/d"}),
			"meshNetworks.networks[net1].gateways[0].locality"},
		{"locality empty part", gw(&meshv1alpha1.Network_IstioNetworkGateway{Gw: &meshv1alpha1.Network_IstioNetworkGateway_Address{Address: "192.0.2.1"}, Port: 1, Locality: "a//c"}),
			"meshNetworks.networks[net1].gateways[0].locality"},
		{"cidr", ep(&meshv1alpha1.Network_NetworkEndpoints{Ne: &meshv1alpha1.Network_NetworkEndpoints_FromCidr{FromCidr: "10.0.0.0/33"}}),
			"meshNetworks.networks[net1].endpoints[0].fromCidr"},
		{"registry", ep(&meshv1alpha1.Network_NetworkEndpoints{Ne: &meshv1alpha1.Network_NetworkEndpoints_FromRegistry{FromRegistry: "Cluster_1"}}),
			"meshNetworks.networks[net1].endpoints[0].fromRegistry"},
		{"empty endpoint", ep(&meshv1alpha1.Network_NetworkEndpoints{}), "meshNetworks.networks[net1].endpoints[0]"},
		{"network name", &meshv1alpha1.MeshNetworks{Networks: map[string]*meshv1alpha1.Network{"bad name": {}}}, "meshNetworks.networks[bad name]"},
	} {
		err := ValidateMeshNetworks(tc.nw)
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.field != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.field+": ")):
			t.Errorf("%s: error %v, want one naming %s", tc.name, err, tc.field)
		}
	}
}

// FuzzParseMeshNetworks feeds arbitrary documents to ParseMeshNetworks
// and ValidateMeshNetworks: they must never panic, an error names the
// meshNetworks, and a parsed value survives a round trip through its own
// encoding. Seeds live in testdata/fuzz/FuzzParseMeshNetworks.
func FuzzParseMeshNetworks(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		nw, err := ParseMeshNetworks(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "meshNetworks") {
				t.Fatalf("error %q does not name the meshNetworks", err)
			}
			return
		}
		if nw == nil {
			t.Fatal("nil MeshNetworks without an error")
		}
		if err := ValidateMeshNetworks(nw); err != nil && !strings.HasPrefix(err.Error(), "meshNetworks.networks[") {
			t.Fatalf("validation error %q does not name a field", err)
		}
		b, err := proto.Marshal(nw)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		back := &meshv1alpha1.MeshNetworks{}
		if err := proto.Unmarshal(b, back); err != nil || !proto.Equal(nw, back) {
			t.Fatalf("round trip: %v", err)
		}
	})
}
