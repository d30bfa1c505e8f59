package ingest_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/protocol"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/meshlimits"
)

// virtualService is a VirtualService demo/name routing to host.
func virtualService(t *testing.T, name, host string) *meshconfig.Object {
	t.Helper()
	return decode(t, fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: %s, namespace: demo}
spec:
  hosts: [%s]
  http:
  - route:
    - destination: {host: %s}
`, name, host, host))[0]
}

// TestMeshLimitsRefuseObjectsAndSpokes: with a mesh limited to two
// objects of a kind and two clusters, a third VirtualService (from another
// cluster) is refused in a NACK naming the kind, the count and the limit
// while what the mesh holds stays and other kinds are accepted; an update
// of a held object is never refused; a removal makes room; a third
// cluster is refused with RESOURCE_EXHAUSTED naming the limit; another
// mesh is not affected.
func TestMeshLimitsRefuseObjectsAndSpokes(t *testing.T) {
	f := newFixtureOpts(t, time.Hour, ingest.ClaimedIdentity(), func(so *ingest.StoreOptions, vo *ingest.ServerOptions) {
		so.LimitMetrics = meshlimits.NewMetrics(so.Registerer)
		vo.Limits = func(mesh string) (int, int) {
			if mesh == "m" {
				return 2, 2
			}
			return 0, 0
		}
	})
	a, b := virtualService(t, "a", "a.demo.svc.cluster.local"), virtualService(t, "b", "b.demo.svc.cluster.local")
	c1 := f.dial(t, "m", "c1")
	c1.sync([]*meshconfig.Object{a, b})

	c2 := f.dial(t, "m", "c2")
	c := virtualService(t, "c", "c.demo.svc.cluster.local")
	nack := c2.nacked(c2.send(vsType, []*meshconfig.Object{c}))
	msg := nack.GetErrorDetail().GetMessage()
	for _, want := range []string{"demo/c", "mesh m has 2 VirtualService objects", "its limit objectsPerKind is 2"} {
		if !strings.Contains(msg, want) {
			t.Errorf("NACK %q does not say %q", msg, want)
		}
	}
	dr := pick(t, decode(t, fullState), "DestinationRule demo/echo")
	c2.acked(c2.send(dr[0].Kind.TypeURL, dr))
	c2.synced()
	if got := refs(f.objects("m", "c2")); len(got) != 1 || got[0] != "DestinationRule demo/echo" {
		t.Errorf("c2 holds %v, want only its DestinationRule", got)
	}
	if got := refs(f.objects("m", "c1")); len(got) != 2 {
		t.Errorf("c1 holds %v, want its two VirtualServices still", got)
	}

	// At the limit, a held object is updated.
	a2 := virtualService(t, "a", "a2.demo.svc.cluster.local")
	c1.acked(c1.send(vsType, []*meshconfig.Object{a2}))
	// A removal makes room for c2's.
	c1.acked(c1.send(vsType, nil, b.Key()))
	c2.acked(c2.send(vsType, []*meshconfig.Object{c}))
	if _, ok := f.objects("m", "c2")["VirtualService demo/c"]; !ok {
		t.Error("c2's VirtualService was not accepted once c1 removed one")
	}

	err := f.dial(t, "m", "c3").ended()
	if !protocol.IsLimitError(err) || !strings.Contains(err.Error(), "mesh m has 2 clusters, its limit spokes is 2") {
		t.Fatalf("a third cluster of m ended with %v; want a limit refusal (RESOURCE_EXHAUSTED, MESH_LIMIT_EXCEEDED) naming the limit", err)
	}
	f.dial(t, "other", "c3").sync([]*meshconfig.Object{a, b, c})
	if got := f.metric(t, "nave_mesh_limit_refusals_total"); got != 2 {
		t.Errorf("nave_mesh_limit_refusals_total = %v, want 2 (an object, a cluster)", got)
	}
}
