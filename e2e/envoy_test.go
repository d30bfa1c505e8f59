package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/envoy"
	"github.com/navemesh/nave/xds/mesh"
)

// reviewsYAML is the same service in both clusters (identical objects are
// no conflict); the VirtualService of the same name differs, so the merge must pick one (the older) and report
// the other. The "broken" VirtualService has two faults the generators
// find (a subset no DestinationRule defines, an unknown host) and one the
// spoke's validation finds (a regex RE2 cannot compile).
func reviewsYAML(created, subset string) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: reviews, namespace: shop}
spec:
  hosts: [reviews.shop.svc.cluster.local]
  ports: [{number: 9080, name: http, protocol: HTTP}]
  location: MESH_INTERNAL
  resolution: STATIC
  endpoints: [{address: 10.1.0.1, labels: {version: v1}}, {address: 10.1.0.2, labels: {version: v2}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: shop}
spec:
  host: reviews.shop.svc.cluster.local
  subsets: [{name: v1, labels: {version: v1}}, {name: v2, labels: {version: v2}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: shop, creationTimestamp: "%s"}
spec:
  hosts: [reviews.shop.svc.cluster.local]
  http: [{route: [{destination: {host: reviews.shop.svc.cluster.local, subset: %s}}]}]
`, created, subset)
}

const brokenYAML = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ratings, namespace: shop}
spec:
  hosts: [ratings.shop.svc.cluster.local]
  ports: [{number: 9080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.2.0.1}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: broken, namespace: shop}
spec:
  hosts: [ratings.shop.svc.cluster.local]
  http:
  - match: [{headers: {x-canary: {exact: "yes"}}}]
    route: [{destination: {host: reviews.shop.svc.cluster.local, subset: v9}}]
  - route: [{destination: {host: nowhere.example.com}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: bad-regex, namespace: shop}
spec:
  hosts: [ratings.shop.svc.cluster.local]
  http: [{match: [{uri: {regex: "(unclosed"}}], route: [{destination: {host: ratings.shop.svc.cluster.local}}]}]
`

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

func httpGet(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b), err
}

// adsClient is a state-of-the-world ADS stream that behaves like Envoy:
// it subscribes per type and ACKs what it receives.
type adsClient struct {
	node   *corev3.Node
	subs   map[string][]string
	stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
}

func dialADS(t *testing.T, h *hub, nodeID string) *adsClient {
	t.Helper()
	conn, err := grpc.NewClient(addr(h.xds), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); conn.Close() })
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	md, _ := structpb.NewStruct(map[string]any{"MESH": "default", "NAMESPACE": "shop", "LABELS": map[string]any{"app": "web"}})
	return &adsClient{node: &corev3.Node{Id: nodeID, Metadata: md}, subs: map[string][]string{}, stream: stream}
}

// fetch subscribes to typeURL (names empty: wildcard), waits for the
// response, ACKs it and returns its resources by name.
func (c *adsClient) fetch(t *testing.T, typeURL string, names ...string) map[string]proto.Message {
	t.Helper()
	if err := c.stream.Send(&discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: typeURL, ResourceNames: names}); err != nil {
		t.Fatal(err)
	}
	c.subs[typeURL] = names
	var resp *discoveryv3.DiscoveryResponse
	deadline := time.After(20 * time.Second)
	for resp == nil {
		type result struct {
			r   *discoveryv3.DiscoveryResponse
			err error
		}
		ch := make(chan result, 1)
		go func() { r, err := c.stream.Recv(); ch <- result{r, err} }()
		select {
		case res := <-ch:
			if res.err != nil {
				t.Fatal(res.err)
			}
			if res.r.GetTypeUrl() == typeURL {
				resp = res.r
			} else {
				// An update of a type subscribed earlier: ACK it, as Envoy does.
				c.ack(t, res.r)
			}
		case <-deadline:
			t.Fatalf("no %s response in 20 s", typeURL)
		}
	}
	out := map[string]proto.Message{}
	for _, a := range resp.GetResources() {
		m, err := a.UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := m.(interface{ ValidateAll() error }); ok {
			if err := v.ValidateAll(); err != nil {
				t.Errorf("%s does not validate: %v", a.GetTypeUrl(), err)
			}
		}
		out[resourceName(m)] = m
	}
	c.ack(t, resp)
	return out
}

func (c *adsClient) ack(t *testing.T, resp *discoveryv3.DiscoveryResponse) {
	t.Helper()
	if err := c.stream.Send(&discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: resp.GetTypeUrl(), ResourceNames: c.subs[resp.GetTypeUrl()],
		VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
		t.Fatal(err)
	}
}

func resourceName(m proto.Message) string {
	if n, ok := m.(interface{ GetName() string }); ok {
		return n.GetName()
	}
	if n, ok := m.(interface{ GetClusterName() string }); ok {
		return n.GetClusterName()
	}
	return ""
}

// TestSpokeFlapPushesNothing: a spoke that disconnects and comes back with
// unchanged state changes nothing a proxy holds (DESIGN.md invariant 4):
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
	before := pushes(t, h)

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

// spokeSynced checks the hub's view of a cluster: connected and synced
// (want true) or disconnected (want false).
func spokeSynced(h *hub, cluster string, want bool) error {
	var spokes []struct {
		Cluster   string `json:"cluster"`
		Connected bool   `json:"connected"`
		Synced    bool   `json:"synced"`
	}
	if err := harness.GetJSON(h.url("/debug/spokes"), &spokes); err != nil {
		return err
	}
	for _, s := range spokes {
		if s.Cluster == cluster && (s.Connected && s.Synced) == want {
			return nil
		}
	}
	return fmt.Errorf("cluster %s not connected+synced=%v: %+v", cluster, want, spokes)
}

// pushes sums nave_xds_pushes_total over every label.
func pushes(t *testing.T, h *hub) float64 {
	t.Helper()
	body, err := httpGet(h.url("/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "nave_xds_pushes_total{") {
			var v float64
			if _, err := fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &v); err == nil {
				sum += v
			}
		}
	}
	return sum
}

// quiet fails if a response arrives within d.
func (c *adsClient) quiet(t *testing.T, d time.Duration, why string) {
	t.Helper()
	ch := make(chan *discoveryv3.DiscoveryResponse, 1)
	go func() {
		if r, err := c.stream.Recv(); err == nil {
			ch <- r
		}
	}()
	select {
	case r := <-ch:
		t.Errorf("%s: the proxy received a %s response (%d resources)", why, r.GetTypeUrl(), len(r.GetResources()))
	case <-time.After(d):
	}
}
