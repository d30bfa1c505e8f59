package ads_test

import (
	"slices"
	"testing"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/ads/adstest"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
)

// A mesh fed by a real hub ingest through the spoke protocol is tested in
// e2e/integration (TestMeshIsAnsweredOnlyOnceAClusterSynced).

const otherYAML = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: other, namespace: shop}
spec:
  hosts: [other.shop.svc.cluster.local]
  ports: [{number: 8080, name: grpc, protocol: GRPC}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.1}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: other, namespace: shop}
spec: {host: other.shop.svc.cluster.local}
`

func TestProxyGetsOnlyItsMesh(t *testing.T) {
	f := newFixture(t, nil)
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, pushctxtest.EchoYAML(80, 20, "ROUND_ROBIN"))))
	f.set(t, "m2", synced("c1", pushctxtest.Decode(t, otherYAML)))

	for _, tc := range []struct {
		name, node, mesh string
		want             []string
	}{
		{"mesh m2", "proxy-1", "m2", []string{"outbound|8080||other.shop.svc.cluster.local"}},
		{"mesh m", "proxy-2", "m", []string{echoV1, echoV2, echoCluster}},
		{"default mesh", "proxy-3", "", []string{echoV1, echoV2, echoCluster}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := f.connect(t, node(tc.node, tc.mesh))
			p.Subscribe(typeurl.Cluster)
			if got := adstest.Names(t, p.Next(typeurl.Cluster)); !slices.Equal(got, tc.want) {
				t.Errorf("clusters = %v, want %v", got, tc.want)
			}
		})
	}

	// A mesh nobody pushed is never ready: its proxies get no answer.
	p := f.connect(t, node("proxy-4", "m3"))
	p.Subscribe(typeurl.Cluster)
	p.Quiet(quietFor, "mesh m3 has no cluster")
}
