package ads_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/shared/meshlimits"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/ads"
	"github.com/navemesh/nave/xds/ads/adstest"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
)

// TestProxiesBeyondTheMeshLimitAreRefused: a mesh limited to two proxies
// refuses a third with RESOURCE_EXHAUSTED naming the limit, while another
// mesh's proxy is served; once one of the two leaves, a new one is served.
func TestProxiesBeyondTheMeshLimitAreRefused(t *testing.T) {
	f := newFixture(t, nil, func(o *ads.Options) {
		o.MaxProxies = func(mesh string) int {
			if mesh == "m" {
				return 2
			}
			return 0
		}
		o.LimitMetrics = meshlimits.NewMetrics(o.Registerer)
	})
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, pushctxtest.EchoYAML(80, 20, "ROUND_ROBIN"))))
	f.set(t, "m2", synced("c1", pushctxtest.Decode(t, otherYAML)))

	served := func(id, meshName string) *adstest.Proxy {
		t.Helper()
		conn := dial(t, f.addr)
		p := adstest.Connect(t, conn, node(id, meshName))
		p.Subscribe(typeurl.Cluster)
		p.Next(typeurl.Cluster)
		t.Cleanup(func() { conn.Close() })
		return p
	}
	served("p1", "m")
	conn2 := dial(t, f.addr)
	p2 := adstest.Connect(t, conn2, node("p2", "m"))
	p2.Subscribe(typeurl.Cluster)
	p2.Next(typeurl.Cluster)

	p3 := f.connect(t, node("p3", "m"))
	p3.Subscribe(typeurl.Cluster)
	err := p3.Ended()
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "its limit proxies is 2") {
		t.Fatalf("a third proxy of mesh m ended with %v; want ResourceExhausted naming the limit", err)
	}
	served("q1", "m2")
	if got := f.metric(t, "nave_mesh_limit_refusals_total"); got != 1 {
		t.Errorf("nave_mesh_limit_refusals_total = %v, want 1", got)
	}

	conn2.Close()
	testwait.Until(t, "p2's stream is gone", func() bool {
		n := 0
		for _, c := range f.ads.Status() {
			if c.Mesh == "m" {
				n++
			}
		}
		return n == 1
	})
	served("p4", "m")
}
