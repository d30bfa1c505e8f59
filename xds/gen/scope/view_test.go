package scope

import (
	"testing"

	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/proxy"
)

// TestSidecarWithoutEgressRestrictsNothing: a Sidecar resource that only
// sets an outbound policy leaves every service visible (Istio reads a
// missing egress as */*).
func TestSidecarWithoutEgressRestrictsNothing(t *testing.T) {
	snap := gentest.Snapshot(t, map[string]string{"c1": gentest.Mesh + `---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: shop}
spec: {outboundTrafficPolicy: {mode: REGISTRY_ONLY}}
`})
	v := New(snap, proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "shop"})
	if v.Service("frontend.web.svc.cluster.local") == nil || v.AllowAny() {
		t.Fatalf("services %d, allowAny %v: want everything visible and REGISTRY_ONLY", len(v.Services()), v.AllowAny())
	}
	if New(snap, proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "other"}).AllowAny() != true {
		t.Fatal("a namespace without a Sidecar resource must allow any")
	}
}
