package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/shared/typeurl"
)

// TestNavectlReadsTheHub runs a real hub and two file spokes, connects an
// Envoy-like proxy that ACKs clusters, NACKs listeners and leaves endpoints
// unanswered, and checks what navectl status, proxy-status and
// proxy-config say about them; then navectl analyze of the spokes'
// directories finds the conflict the hub resolved, by the same rule.
func TestNavectlReadsTheHub(t *testing.T) {
	h := newHub(t)
	admin := "--hub-admin=" + h.url("")
	dir1, dir2 := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(dir1, "reviews.yaml"), reviewsYAML("2026-03-01T00:00:00Z", "v1"))
	writeFile(t, filepath.Join(dir1, "broken.yaml"), brokenYAML)
	writeFile(t, filepath.Join(dir2, "reviews.yaml"), reviewsYAML("2026-01-01T00:00:00Z", "v2"))
	newSpoke(t, h, "c1", dir1)
	s2 := newSpoke(t, h, "c2", dir2)
	waitOneMesh(t, h, 2)

	const node = "sidecar~10.9.0.1~web-1.shop~shop.svc.cluster.local"
	p := dialADS(t, h, node)
	sentClusters := p.fetch(t, typeurl.Cluster)
	if err := p.stream.Send(&discoveryv3.DiscoveryRequest{Node: p.node, TypeUrl: typeurl.Listener}); err != nil {
		t.Fatal(err)
	}
	lds := p.recvType(t, typeurl.Listener)
	if err := p.stream.Send(&discoveryv3.DiscoveryRequest{Node: p.node, TypeUrl: typeurl.Listener, ResponseNonce: lds.GetNonce(),
		ErrorDetail: &status.Status{Code: 3, Message: "test refuses listeners"}}); err != nil {
		t.Fatal(err)
	}
	eds := "outbound|9080||reviews.shop.svc.cluster.local"
	if err := p.stream.Send(&discoveryv3.DiscoveryRequest{Node: p.node, TypeUrl: typeurl.Endpoint, ResourceNames: []string{eds}}); err != nil {
		t.Fatal(err)
	}
	p.recvType(t, typeurl.Endpoint) // and never ACKed

	t.Run("proxy-status", func(t *testing.T) {
		want := map[string]string{"Cluster": "SYNCED", "Listener": "NACKED", "ClusterLoadAssignment": "STALE", "RouteConfiguration": "NOT SENT", "Secret": "NOT SENT"}
		var got []struct {
			ID     string            `json:"id"`
			NodeID string            `json:"nodeId"`
			States map[string]string `json:"states"`
		}
		testwait.For(t, 10*time.Second, func() error {
			code, out, stderr := navectlExit(t, "proxy-status", admin, "-o", "json")
			if code != 0 {
				return fmt.Errorf("proxy-status -o json: exit %d: %s", code, stderr)
			}
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				return err
			}
			if len(got) != 1 || got[0].NodeID != node || fmt.Sprint(got[0].States) != fmt.Sprint(want) {
				return fmt.Errorf("proxy-status -o json: %+v; want %s in states %v", got, node, want)
			}
			return nil
		})
		code, out, _ := navectlExit(t, "proxy-status", admin)
		if code != 0 || !strings.Contains(out, got[0].ID) || !regexpMatch(out, `default\s+sidecar\s+SYNCED\s+NACKED\s+STALE\s+NOT SENT\s+NOT SENT`) {
			t.Errorf("proxy-status: exit %d:\n%s", code, out)
		}
		code, out, _ = navectlExit(t, "proxy-status", "web-1.shop", admin)
		if code != 0 || !strings.Contains(out, "test refuses listeners") || !strings.Contains(out, "Node:       "+node) {
			t.Errorf("proxy-status web-1.shop: exit %d; want the NACK reason:\n%s", code, out)
		}
		// Shell completion offers the connected proxies.
		code, out, _ = navectlExit(t, "__complete", "proxy-config", admin, "clusters", "side")
		if code != 0 || !strings.Contains(out, got[0].ID+"\tdefault sidecar") {
			t.Errorf("completion of proxy-config clusters side: exit %d:\n%s", code, out)
		}
		code, _, stderr := navectlExit(t, "proxy-status", "nobody", admin)
		if code != 1 || !strings.Contains(stderr, `no connected proxy named "nobody"`) {
			t.Errorf("proxy-status nobody: exit %d, %s", code, stderr)
		}
	})

	t.Run("proxy-config", func(t *testing.T) {
		// What the hub would send is what the proxy got.
		code, out, stderr := navectlExit(t, "proxy-config", "clusters", "web-1.shop", admin, "-o", "json")
		var clusters []struct {
			Name string `json:"name"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &clusters) != nil {
			t.Fatalf("proxy-config clusters -o json: exit %d: %s%s", code, out, stderr)
		}
		var names, sent []string
		for _, c := range clusters {
			names = append(names, c.Name)
		}
		for n := range sentClusters {
			sent = append(sent, n)
		}
		sort.Strings(names)
		sort.Strings(sent)
		if !slices.Equal(names, sent) {
			t.Errorf("proxy-config clusters lists %v; the proxy was sent %v", names, sent)
		}
		for kind, want := range map[string]string{
			"clusters":  regexp.QuoteMeta(eds) + `\s+EDS\s+plaintext`,
			"listeners": `FILTER CHAINS`,
			"routes":    `reviews\.shop\.svc\.cluster\.local`,
			"endpoints": regexp.QuoteMeta(eds) + `\s+10\.1\.0\.`,
			"secrets":   `^NAME\s+TYPE\s+IDENTITY\s+SERIAL\s+NOT AFTER\n$`, // plaintext: no secrets, the header only
		} {
			code, out, stderr := navectlExit(t, "proxy-config", kind, node, admin)
			if code != 0 || !regexpMatch(out, want) {
				t.Errorf("proxy-config %s: exit %d, want %s in:\n%s%s", kind, code, want, out, stderr)
			}
		}
		code, out, _ = navectlExit(t, "proxy-config", "routes", node, admin, "-o", "yaml")
		if code != 0 || !strings.Contains(out, "virtualHosts:") {
			t.Errorf("proxy-config routes -o yaml: exit %d:\n%s", code, out)
		}
		code, _, stderr = navectlExit(t, "proxy-config", "filters", node, admin)
		if code != 2 || !strings.Contains(stderr, `unknown kind "filters"`) {
			t.Errorf("proxy-config filters: exit %d, %s", code, stderr)
		}
	})

	t.Run("status", func(t *testing.T) {
		code, out, stderr := navectlExit(t, "status", admin)
		if code != 0 || !regexpMatch(out, `default\s+c1\s+connected\s+\d+s`) || !regexpMatch(out, `default\s+c2\s+connected`) ||
			!strings.Contains(out, "conflict  default: VirtualService shop/reviews: c2's definition wins over c1's") {
			t.Errorf("status: exit %d:\n%s%s", code, out, stderr)
		}
		if strings.Contains(out, "REPLICAS") {
			t.Errorf("status shows a replicas section for a hub without /debug/replicas:\n%s", out)
		}
		// c2's spoke stops: the cluster turns stale, its withdrawal is due.
		s2.proc.Stop(10 * time.Second)
		testwait.For(t, 10*time.Second, func() error {
			code, out, stderr := navectlExit(t, "status", admin, "-o", "json")
			var rep struct {
				Meshes []struct {
					Mesh     string `json:"mesh"`
					Clusters []struct {
						Cluster    string     `json:"cluster"`
						State      string     `json:"state"`
						WithdrawAt *time.Time `json:"withdrawAt"`
					} `json:"clusters"`
				} `json:"meshes"`
			}
			if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Meshes) != 1 {
				return fmt.Errorf("status -o json: exit %d: %s%s", code, out, stderr)
			}
			states := map[string]string{}
			for _, c := range rep.Meshes[0].Clusters {
				states[c.Cluster] = c.State
				if c.State == "stale" && c.WithdrawAt == nil {
					return fmt.Errorf("stale cluster %s without a withdrawal time", c.Cluster)
				}
			}
			if states["c1"] != "connected" || states["c2"] != "stale" {
				return fmt.Errorf("cluster states %v; want c1 connected, c2 stale", states)
			}
			return nil
		})
	})

	t.Run("analyze", func(t *testing.T) {
		// The hub resolved the conflict for c2 (older); analyze says the same,
		// and finds what the spoke rejected, in the same field.
		code, out, stderr := navectlExit(t, "analyze", "--cluster", "c1="+dir1, "--cluster", "c2="+dir2)
		if code != 1 || !regexpMatch(out, `conflict\s+c1\s+\S+reviews.yaml#2\s+VirtualService shop/reviews`) ||
			!strings.Contains(out, "the hub uses c2's") || !regexpMatch(out, `validation\s+c1\s+\S+broken.yaml#2\s+VirtualService shop/bad-regex\s+spec.http\[0\].match\[0\].uri.regex`) ||
			!regexpMatch(out, `subset\s+c1\s+\S+broken.yaml#1\s+VirtualService shop/broken\s+spec.http\[0\].route\[0\].destination.subset`) {
			t.Errorf("analyze of the spokes' directories: exit %d:\n%s%s", code, out, stderr)
		}
	})

	code, _, stderr := navectlExit(t, "status", "--hub-admin=http://"+addr(harness.FreePort(t)))
	if code != 1 || !strings.Contains(stderr, "connection refused") {
		t.Errorf("status of a hub that is not there: exit %d, %s", code, stderr)
	}
}

// regexpMatch reports whether s matches the regular expression re.
func regexpMatch(s, re string) bool { return regexp.MustCompile(re).MatchString(s) }
