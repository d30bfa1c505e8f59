package scope

import (
	"fmt"

	"testing"

	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// TestLocalityOf: the registry's locality of the workload at a proxy's
// addresses, then its istio-locality label, then its node's locality;
// endpoints of another network do not count, and addresses whose
// endpoints disagree (overlapping pod addresses in two clusters) give the
// registry no say.
func TestLocalityOf(t *testing.T) {
	const se = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: %s, namespace: shop}
spec:
  hosts: [%s.shop.svc.cluster.local]
  location: MESH_INTERNAL
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: %s
`
	snap := gentest.Snapshot(t, map[string]string{
		"c1": gentest.Mesh + "---\n" + fmt.Sprintf(se, "a", "a", `[{address: 10.0.0.1, locality: us/east-1}, {address: 10.0.0.2, locality: eu/west-1, network: n2}, {address: 10.0.0.3, locality: us/east-1}, {address: 10.0.0.4}]`),
		"c2": fmt.Sprintf(se, "b", "b", `[{address: 10.0.0.3, locality: ap/south-1}]`),
	})
	node := mesh.Locality{Region: "node", Zone: "z"}
	for _, c := range []struct {
		name string
		k    proxy.Key
		want mesh.Locality
	}{
		{"endpoint", proxy.Key{IPs: "10.0.0.1", Locality: node}, mesh.Locality{Region: "us", Zone: "east-1"}},
		{"endpoint of its own network", proxy.Key{IPs: "10.0.0.2", Network: "n2"}, mesh.Locality{Region: "eu", Zone: "west-1"}},
		{"endpoint of another network", proxy.Key{IPs: "10.0.0.2", Network: "n1", Locality: node}, node},
		{"endpoints disagree", proxy.Key{IPs: "10.0.0.3", Locality: node}, node},
		{"endpoint without locality, label", proxy.Key{IPs: "10.0.0.4", Labels: "app=x\nistio-locality=r.z.s", Locality: node}, mesh.Locality{Region: "r", Zone: "z", Subzone: "s"}},
		{"unknown address", proxy.Key{IPs: "10.9.9.9", Locality: node}, node},
		{"no address, label", proxy.Key{Labels: "istio-locality=r"}, mesh.Locality{Region: "r"}},
		{"nothing", proxy.Key{}, mesh.Locality{}},
	} {
		if got := LocalityOf(snap, c.k); got != c.want {
			t.Errorf("%s: LocalityOf = %+v, want %+v", c.name, got, c.want)
		}
	}
}
