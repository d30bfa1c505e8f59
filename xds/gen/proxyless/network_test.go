package proxyless

import (
	"slices"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/gentest"
)

// TestGRPCEndpointsOwnNetworkOnly: a proxyless client never receives an
// endpoint of another network, nor the network's gateway (grpc-go does
// not send the SNI the gateway routes by); a client of no known network
// gets every endpoint; the clients' key reads the network.
func TestGRPCEndpointsOwnNetworkOnly(t *testing.T) {
	const y = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: demo}
spec:
  hosts: [echo.demo.svc.cluster.local]
  location: MESH_INTERNAL
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  endpoints:
  - {address: 10.0.0.1, network: net-a, labels: {security.istio.io/tlsMode: istio}}
  - {address: 10.1.0.1, network: net-b, labels: {security.istio.io/tlsMode: istio}}
  - {address: 10.2.0.1}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata:
  name: eastwest
  namespace: istio-system
  labels: {topology.istio.io/network: net-b, networking.istio.io/gatewayPort: "15443"}
spec: {address: 192.0.2.1}
`
	snap := gentest.Snapshot(t, map[string]string{"c1": y})
	if !ClientReads(snap).Network {
		t.Fatal("ClientReads does not read the network of a mesh with endpoints on networks")
	}
	name := build.ClusterName("echo.demo.svc.cluster.local", 7070, "")
	addresses := func(out *build.Output) []string {
		var got []string
		for _, r := range out.Resources[typeurl.Endpoint] {
			if r.Name != name {
				continue
			}
			for _, l := range r.Message.(*endpointv3.ClusterLoadAssignment).GetEndpoints() {
				for _, e := range l.GetLbEndpoints() {
					got = append(got, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
				}
			}
		}
		slices.Sort(got)
		return got
	}
	for network, want := range map[string][]string{
		"net-a": {"10.0.0.1", "10.2.0.1"},
		"net-b": {"10.1.0.1", "10.2.0.1"},
		"":      {"10.0.0.1", "10.1.0.1", "10.2.0.1"},
	} {
		c := build.Client{Network: network}
		out := Generate(snap, c)
		gentest.ValidateAll(t, out)
		if got := addresses(out); !slices.Equal(got, want) {
			t.Errorf("client on %q gets %v, want %v", network, got, want)
		}
		if got := addresses(ClientEndpoints(snap, c)); !slices.Equal(got, want) {
			t.Errorf("ClientEndpoints for %q gives %v, want %v", network, got, want)
		}
		if got := addresses(&build.Output{Resources: map[string][]build.Resource{typeurl.Endpoint: Endpoints(snap, map[string]bool{"echo.demo.svc.cluster.local": true}, c)}}); !slices.Equal(got, want) {
			t.Errorf("Endpoints for %q gives %v, want %v", network, got, want)
		}
	}
}
