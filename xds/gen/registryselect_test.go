package gen

import (
	"fmt"
	"slices"
	"testing"

	"github.com/navemesh/nave/shared/meshconfig"
	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/gen/proxyless"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

const vmHost = "vm.shop.svc.cluster.local"

// vmEntry is WorkloadEntry name of namespace shop with app=vm at address,
// with ports (YAML flow map, "" for none).
func vmEntry(t *testing.T, name, address, ports string) *meshconfig.Object {
	t.Helper()
	if ports != "" {
		ports = ", ports: " + ports
	}
	return gentest.Decode(t, fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: %s, namespace: shop}\n"+
		"spec: {address: %s, labels: {app: vm}, locality: us-east/zone-a%s}\n", name, address, ports))[0]
}

// TestKubernetesServiceSelectsWorkloadEntries: the load assignments of a
// Kubernetes Service whose selector picks WorkloadEntries, for Envoy and
// proxyless clients, and the inbound ports of the entries' own proxies:
// a port whose target port is a number is served on the entry's port of
// the service port's name, else that number; a port whose target port is
// a name on the entry's port of that name, and not by an entry without
// one. When an entry moves, an endpoint-only build and generation follow.
func TestKubernetesServiceSelectsWorkloadEntries(t *testing.T) {
	svc := gentest.Registry(t, "Service", "vm", "shop", &meshconfigv1.Service{
		Hostname: vmHost, Addresses: []string{"10.96.0.20"}, Selector: map[string]string{"app": "vm"},
		Ports: []*meshconfigv1.ServicePort{
			{Name: "http", Number: 80, Protocol: "HTTP", TargetPort: 8080},
			{Name: "grpc", Number: 90, Protocol: "GRPC", TargetPortName: "grpc-vm"},
		},
	})
	objs := []*meshconfig.Object{svc, vmEntry(t, "vm-1", "10.0.0.1", "{http: 18080, grpc-vm: 19090}"), vmEntry(t, "vm-2", "10.0.0.2", "")}
	in := func() []mesh.ClusterInput {
		return []mesh.ClusterInput{{Name: "c1", Synced: true, Connected: true, Objects: objs}}
	}
	var b mesh.Builder
	s := b.Build("m", in())
	http, grpc := build.ClusterName(vmHost, 80, ""), build.ClusterName(vmHost, 90, "")
	wantHTTP, wantGRPC := []string{"10.0.0.1:18080", "10.0.0.2:8080"}, []string{"10.0.0.1:19090"}

	key := proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "web", IPs: "10.9.9.9"}
	envoyOut := Envoy(s, key)
	gentest.ValidateAll(t, envoyOut)
	grpcOut := GRPC(s)
	gentest.ValidateAll(t, grpcOut)
	for name, out := range map[string]*Output{"envoy": envoyOut, "proxyless": grpcOut} {
		if got := gentest.AddressPorts(assignment(t, out, http)); !slices.Equal(got, wantHTTP) {
			t.Errorf("%s: %s = %v, want %v", name, http, got, wantHTTP)
		}
		if got := gentest.AddressPorts(assignment(t, out, grpc)); !slices.Equal(got, wantGRPC) {
			t.Errorf("%s: %s = %v, want %v (vm-2 has no port grpc-vm)", name, grpc, got, wantGRPC)
		}
	}

	// The entries' own proxies serve the ports they serve the service on.
	for ip, want := range map[string][]string{"10.0.0.1": {"18080", "19090"}, "10.0.0.2": {"8080"}} {
		ls, _ := GRPCServerListeners(s, proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "shop", IPs: ip})
		var got []string
		for _, l := range ls {
			for _, p := range want {
				if l.Name == proxyless.ServerListenerName("0.0.0.0:"+p) {
					got = append(got, p)
				}
			}
		}
		if len(ls) != 2*len(want) || !slices.Equal(got, want) {
			t.Errorf("server listeners of the entry at %s: %v, want ports %v on both wildcard addresses", ip, gentest.Names(ls), want)
		}
	}

	// vm-2 moves and gets its grpc-vm port: the build updates the
	// service's endpoints only, and the endpoint-only generation has them.
	objs[2] = vmEntry(t, "vm-2", "10.0.0.3", "{grpc-vm: 19091}")
	next := b.Build("m", in())
	d := mesh.DiffSnapshots(s, next)
	if d.Config || len(d.Hosts) != 1 || !d.Hosts[vmHost] || !d.Addresses["10.0.0.2"] || !d.Addresses["10.0.0.3"] {
		t.Fatalf("diff after vm-2 moved: %+v, want the endpoints of %s only", d, vmHost)
	}
	eds := EnvoyEndpointsChanged(next, key, d.Hosts).Resources[typeurl.Endpoint]
	grpcEDS := GRPCEndpoints(next, d.Hosts, GRPCClient{})
	for name, rs := range map[string][]Resource{"envoy": eds, "proxyless": grpcEDS} {
		out := &Output{Resources: map[string][]Resource{typeurl.Endpoint: rs}}
		if got, want := gentest.AddressPorts(assignment(t, out, http)), []string{"10.0.0.1:18080", "10.0.0.3:8080"}; !slices.Equal(got, want) {
			t.Errorf("%s after the move: %s = %v, want %v", name, http, got, want)
		}
		if got, want := gentest.AddressPorts(assignment(t, out, grpc)), []string{"10.0.0.1:19090", "10.0.0.3:19091"}; !slices.Equal(got, want) {
			t.Errorf("%s after the move: %s = %v, want %v", name, grpc, got, want)
		}
	}
}
