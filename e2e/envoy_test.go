package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/envoy"
	"github.com/navemesh/nave/xds/mesh"
)

// TestEnvoyConfigAcrossClusters runs the real hub and two spokes and
// connects as an Envoy sidecar: the merged config arrives, the
// cross-cluster conflict resolves to the older definition and is reported
// at /debug/meshes and as a metric, and broken config is reported naming
// the resource and field while everything else is still served.
func TestEnvoyConfigAcrossClusters(t *testing.T) {
	h := newHub(t)
	dir1, dir2 := t.TempDir(), t.TempDir()
	// c2's VirtualService is the older one: it must win although c1 sorts first.
	writeFile(t, filepath.Join(dir1, "reviews.yaml"), reviewsYAML("2026-03-01T00:00:00Z", "v1"))
	writeFile(t, filepath.Join(dir1, "broken.yaml"), brokenYAML)
	writeFile(t, filepath.Join(dir2, "reviews.yaml"), reviewsYAML("2026-01-01T00:00:00Z", "v2"))
	s1 := newSpoke(t, h, "c1", dir1)
	newSpoke(t, h, "c2", dir2)

	// The spoke refuses the regex before it leaves the cluster, naming the field.
	testwait.For(t, 10*time.Second, func() error {
		body, err := httpGet(s1.url("/debug/rejected"))
		if err != nil {
			return err
		}
		if !strings.Contains(body, "bad-regex") || !strings.Contains(body, "spec.http[0].match[0].uri.regex") {
			return fmt.Errorf("spoke's /debug/rejected lacks the bad regex: %s", body)
		}
		return nil
	})

	// Wait for both clusters to be merged.
	waitOneMesh(t, h, 2)

	p := dialADS(t, h, "sidecar~10.9.0.1~web-1.shop~shop.svc.cluster.local")
	clusters := p.fetch(t, typeurl.Cluster)
	for _, want := range []string{"outbound|9080||reviews.shop.svc.cluster.local", "outbound|9080|v2|reviews.shop.svc.cluster.local",
		"outbound|9080||ratings.shop.svc.cluster.local"} {
		if _, ok := clusters[want]; !ok {
			t.Errorf("CDS lacks %s", want)
		}
	}
	if c := clusters["outbound|9080||reviews.shop.svc.cluster.local"]; c != nil {
		if c.(*clusterv3.Cluster).GetEdsClusterConfig() == nil {
			t.Errorf("reviews is not an EDS cluster: %v", c)
		}
	}
	p.fetch(t, typeurl.Listener)
	routes := p.fetch(t, typeurl.Route, envoy.SidecarRouteName(9080))
	rc, _ := routes[envoy.SidecarRouteName(9080)].(*routev3.RouteConfiguration)
	got := map[string]string{} // virtual host → first route's cluster
	for _, vh := range rc.GetVirtualHosts() {
		if len(vh.GetRoutes()) > 0 {
			got[vh.GetDomains()[0]] = vh.GetRoutes()[0].GetRoute().GetCluster()
		}
	}
	if c := got["reviews.shop.svc.cluster.local"]; c != "outbound|9080|v2|reviews.shop.svc.cluster.local" {
		t.Errorf("reviews routes to %q, want c2's (older) VirtualService's subset v2", c)
	}
	// The broken VirtualService still routes: its first rule to a missing
	// subset is kept so requests fail visibly as Istio does, the default route
	// to an unknown host is reported.
	if _, ok := got["ratings.shop.svc.cluster.local"]; !ok {
		t.Errorf("ratings has no virtual host: %v", got)
	}

	var meshes []struct {
		Conflicts []mesh.Conflict `json:"conflicts"`
		Problems  []mesh.Problem  `json:"problems"`
	}
	if err := harness.GetJSON(h.url("/debug/meshes"), &meshes); err != nil {
		t.Fatal(err)
	}
	var conflictSeen bool
	for _, c := range meshes[0].Conflicts {
		if c.Kind == "VirtualService" && c.Key == "shop/reviews" && c.WinnerCluster == "c2" && c.LoserCluster == "c1" {
			conflictSeen = true
		}
	}
	if !conflictSeen {
		t.Errorf("/debug/meshes conflicts %+v lack VirtualService shop/reviews won by c2 over c1", meshes[0].Conflicts)
	}
	for _, want := range []struct{ resource, field, reason string }{
		{"VirtualService shop/broken", "spec.http[0].route[0].destination.subset", "v9"},
		{"VirtualService shop/broken", "spec.http[1].route[0].destination.host", "nowhere.example.com"},
	} {
		found := false
		for _, pr := range meshes[0].Problems {
			if strings.Contains(pr.Resource, want.resource) && pr.Field == want.field && strings.Contains(pr.Reason, want.reason) {
				found = true
			}
		}
		if !found {
			t.Errorf("/debug/meshes problems lack %s %s (%s): %+v", want.resource, want.field, want.reason, meshes[0].Problems)
		}
	}
	metrics, err := httpGet(h.url("/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`nave_mesh_config_conflicts{mesh="default"} 1`, `nave_mesh_config_problems{mesh="default"}`,
		"nave_proxy_generation_mismatches_total 0"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("hub metrics lack %s", want)
		}
	}
}

// TestSpokeFlapPushesNothing: a spoke that disconnects and comes back with
// unchanged state changes nothing a proxy holds (docs/design.md invariant 4):
// an Envoy sidecar on state-of-the-world ADS receives no response during
// the flap or after the resync, and the hub counts no pushes. The hub
// holds the cluster, so the restarted spoke resumes (decision 030): it
// sends no resource.
func TestSpokeFlapPushesNothing(t *testing.T) {
	h := newHub(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "reviews.yaml"), reviewsYAML("2026-01-01T00:00:00Z", "v2"))
	sp := newSpoke(t, h, "c1", dir)
	testwait.For(t, 20*time.Second, func() error { return spokeSynced(h, "c1", true) })

	p := dialADS(t, h, "sidecar~10.9.0.1~web-1.shop~shop.svc.cluster.local")
	clusters := p.fetch(t, typeurl.Cluster)
	var eds []string
	for name, c := range clusters {
		if c.(*clusterv3.Cluster).GetEdsClusterConfig() != nil {
			eds = append(eds, name)
		}
	}
	p.fetch(t, typeurl.Listener)
	p.fetch(t, typeurl.Endpoint, eds...)
	p.fetch(t, typeurl.Route, envoy.SidecarRouteName(9080))
	// The hub counts a response once its send returned, which can be after
	// the proxy read it: awaited until every response read is counted.
	var before float64
	testwait.For(t, 20*time.Second, func() error {
		if before = pushes(t, h); before < float64(p.received.Load()) {
			return fmt.Errorf("the hub counted %v responses, the proxy read %d", before, p.received.Load())
		}
		return nil
	})

	// Flap: the spoke stops; the hub keeps its state (stale); the spoke
	// starts again on the same directory and resyncs.
	sp.proc.Stop(5 * time.Second)
	testwait.For(t, 20*time.Second, func() error { return spokeSynced(h, "c1", false) })
	newSpoke(t, h, "c1", dir)
	testwait.For(t, 20*time.Second, func() error { return spokeSynced(h, "c1", true) })

	p.quiet(t, 2*time.Second, "a spoke flap with unchanged state")
	if after := pushes(t, h); after != before {
		t.Errorf("the hub counted %v responses to proxies during the flap (before %v)", after-before, before)
	}
	if n := scrape(t, h.url("/metrics"), `nave_hub_ingest_resume_requests_total{result="resumed",stream="spoke"}`); n != 1 {
		t.Errorf("the hub resumed %g spoke streams, want 1 (the spoke's return)", n)
	}
	if n := scrape(t, h.url("/metrics"), "nave_hub_ingest_resume_unchanged_resources_total"); n == 0 {
		t.Error("the resumed stream counted no unchanged resource")
	}
}
