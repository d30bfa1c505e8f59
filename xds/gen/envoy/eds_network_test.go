package envoy

import (
	"strings"
	"testing"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/mesh"
)

// splitHorizonConfig: db has endpoints on net-a, net-b (two gateways,
// WorkloadEntries) and net-c (no gateway); one net-b endpoint runs no
// sidecar.
const splitHorizonConfig = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: demo}
spec:
  hosts: [db.demo.svc.cluster.local]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 5432, name: pg, protocol: TCP}]
  endpoints:
  - {address: 10.0.0.1, network: net-a, locality: r/z1, labels: {security.istio.io/tlsMode: istio}}
  - {address: 10.1.0.1, network: net-b, locality: r/z1, labels: {security.istio.io/tlsMode: istio}}
  - {address: 10.1.0.2, network: net-b, locality: r/z2, weight: 3, labels: {security.istio.io/tlsMode: istio}}
  - {address: 10.1.0.3, network: net-b, locality: r/z2}
  - {address: 10.2.0.1, network: net-c, locality: r/z1, labels: {security.istio.io/tlsMode: istio}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata:
  name: eastwest-1
  namespace: istio-system
  labels: {topology.istio.io/network: net-b, networking.istio.io/gatewayPort: "15443"}
spec: {address: 192.0.2.1}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata:
  name: eastwest-2
  namespace: istio-system
  labels: {topology.istio.io/network: net-b, networking.istio.io/gatewayPort: "15443"}
spec: {address: 192.0.2.2}
`

func TestEnvoyEndpointsSplitHorizon(t *testing.T) {
	name := build.ClusterName("db.demo.svc.cluster.local", 5432, "")
	for _, tt := range []struct {
		desc, network, extra, want string
	}{
		{desc: "net-a: its own endpoint direct; net-b's through its two gateways, weights scaled by 2 and split; net-c (no gateway) and the sidecar-less endpoint left out",
			network: "net-a",
			want: "P0 r/z1/ w=4 10.0.0.1:5432/2 192.0.2.1:15443/1 192.0.2.2:15443/1\n" +
				"P0 r/z2/ w=6 192.0.2.1:15443/3 192.0.2.2:15443/3\n"},
		{desc: "net-b: its own endpoints direct (weights scaled); net-a and net-c have no gateway",
			network: "net-b",
			want:    "P0 r/z1/ w=2 10.1.0.1:5432/2\nP0 r/z2/ w=8 10.1.0.2:5432/6 10.1.0.3:5432/2\n"},
		{desc: "no network: every endpoint direct (everyone's network)",
			network: "",
			want:    "P0 r/z1/ w=3 10.0.0.1:5432/1 10.1.0.1:5432/1 10.2.0.1:5432/1\nP0 r/z2/ w=4 10.1.0.2:5432/3 10.1.0.3:5432/1\n"},
		{desc: "TLS DISABLE: no mesh mTLS, so no gateway",
			network: "net-a", extra: "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: db, namespace: demo}\nspec: {host: db.demo.svc.cluster.local, trafficPolicy: {tls: {mode: DISABLE}}}\n",
			want: "P0 r/z1/ w=2 10.0.0.1:5432/2\n"},
		{desc: "ISTIO_MUTUAL: every remote endpoint of a network with a gateway, sidecar or not (Istio's rule)",
			network: "net-a", extra: "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: db, namespace: demo}\nspec: {host: db.demo.svc.cluster.local, trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}}\n",
			want: "P0 r/z1/ w=4 10.0.0.1:5432/2 192.0.2.1:15443/1 192.0.2.2:15443/1\n" +
				"P0 r/z2/ w=8 192.0.2.1:15443/4 192.0.2.2:15443/4\n"},
	} {
		t.Run(tt.network+" "+tt.desc, func(t *testing.T) {
			key := sidecarKey("demo", mesh.Locality{})
			key.Network = tt.network
			out := envoyOut(t, splitHorizonConfig+tt.extra, key)
			cla := claOf(t, out, name)
			if got := layout(cla); got != tt.want {
				t.Errorf("assignment:\n%s\nwant:\n%s", got, tt.want)
			}
			for _, l := range cla.GetEndpoints() {
				for _, e := range l.GetLbEndpoints() {
					if !strings.HasPrefix(e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress(), "192.0.2.") {
						continue
					}
					md := e.GetMetadata().GetFilterMetadata()
					if md[transportSocketMatchKey].GetFields()["tlsMode"].GetStringValue() != tlsModeIstio || len(md) != 1 {
						t.Errorf("gateway endpoint metadata = %v, want tlsMode istio only", md)
					}
				}
			}
			if len(out.Problems) != 0 {
				t.Errorf("problems = %+v", out.Problems)
			}
		})
	}
}

// TestEnvoyEndpointsSplitHorizonClusterLocal: a cluster-local service
// never leaves the proxy's cluster, gateways or not; other services
// reach the other cluster's network through its gateway.
func TestEnvoyEndpointsSplitHorizonClusterLocal(t *testing.T) {
	const c1 = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: demo}
spec:
  hosts: [db.demo.svc.cluster.local, cache.demo.svc.cluster.local]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 5432, name: pg, protocol: TCP}]
  endpoints: [{address: 10.0.0.1, network: net-a, labels: {security.istio.io/tlsMode: istio}}]
`
	const c2 = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db-c2, namespace: demo}
spec:
  hosts: [db.demo.svc.cluster.local, cache.demo.svc.cluster.local]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 5432, name: pg, protocol: TCP}]
  endpoints: [{address: 10.1.0.1, network: net-b, labels: {security.istio.io/tlsMode: istio}}]
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata:
  name: eastwest
  namespace: istio-system
  labels: {topology.istio.io/network: net-b, networking.istio.io/gatewayPort: "15443"}
spec: {address: 192.0.2.1}
`
	var in []mesh.ClusterInput
	for name, y := range map[string]string{"c1": c1, "c2": c2} {
		objs, errs := meshconfig.DecodeYAML([]byte(y), name+".yaml")
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		in = append(in, mesh.ClusterInput{Name: name, Synced: true, Connected: true, Objects: objs})
	}
	mc := &meshv1alpha1.MeshConfig{ServiceSettings: []*meshv1alpha1.MeshConfig_ServiceSettings{{
		Settings: &meshv1alpha1.MeshConfig_ServiceSettings_Settings{ClusterLocal: true}, Hosts: []string{"db.demo.svc.cluster.local"}}}}
	snap := (&mesh.Builder{MeshConfig: mc}).Build("m", in)
	key := sidecarKey("demo", mesh.Locality{})
	key.Network, key.Cluster = "net-a", "c1"
	out := generate(snap, key)
	gentest.ValidateAll(t, out)
	if got := layout(claOf(t, out, build.ClusterName("db.demo.svc.cluster.local", 5432, ""))); got != "P0 // w=1 10.0.0.1:5432/1\n" {
		t.Errorf("cluster-local assignment:\n%s", got)
	}
	if got := layout(claOf(t, out, build.ClusterName("cache.demo.svc.cluster.local", 5432, ""))); got != "P0 // w=2 10.0.0.1:5432/1 192.0.2.1:15443/1\n" {
		t.Errorf("other service's assignment:\n%s", got)
	}
}
