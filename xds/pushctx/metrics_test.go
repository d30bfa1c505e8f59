package pushctx

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/mesh"
)

// TestUnreachableEndpointsMetric: each network's unreachable endpoints
// are set per mesh, and a network the next snapshot no longer has loses
// its series.
func TestUnreachableEndpointsMetric(t *testing.T) {
	m := newMetrics(prometheus.NewRegistry())
	build := func(y string) *mesh.Snapshot {
		objs, errs := meshconfig.DecodeYAML([]byte(y), "c1.yaml")
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		return mesh.Build("m", []mesh.ClusterInput{{Name: "c1", Objects: objs}})
	}
	const two = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: shop}
spec:
  hosts: [db.shop.svc.cluster.local]
  resolution: STATIC
  ports: [{number: 5432, name: pg, protocol: TCP}]
  endpoints: [{address: 10.1.0.1, network: net-b}, {address: 10.1.0.2, network: net-b}, {address: 10.2.0.1, network: net-c}]
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: eastwest, namespace: istio-system, labels: {topology.istio.io/network: net-c, networking.istio.io/gatewayPort: "15443"}}
spec: {address: 192.0.2.1}
`
	last := m.reportNetworks("m", build(two), nil)
	if got := testutil.ToFloat64(m.unreachable.WithLabelValues("m", "net-b")); got != 2 {
		t.Errorf("net-b unreachable = %v, want 2 (no gateway)", got)
	}
	if got := testutil.ToFloat64(m.unreachable.WithLabelValues("m", "net-c")); got != 0 {
		t.Errorf("net-c unreachable = %v, want 0 (it has a gateway)", got)
	}
	m.reportNetworks("m", build("apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: db, namespace: shop}\nspec: {hosts: [db.shop.svc.cluster.local], resolution: STATIC, ports: [{number: 5432, name: pg, protocol: TCP}], endpoints: [{address: 10.0.0.1}]}\n"), last)
	if n := testutil.CollectAndCount(m.unreachable); n != 0 {
		t.Errorf("%d series left after the networks went, want 0", n)
	}
}
