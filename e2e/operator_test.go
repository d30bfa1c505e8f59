package e2e

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/xds/ads"
)

// TestOperatorAdminIsScoped runs a TLS hub with an operator listener
// holding clusters and proxies of two meshes: the vendor's operator sees
// both, a tenant's operator only its own (asking for the other's proxies,
// clusters or config finds nothing), and the vendor-only views, profiles and
// metrics are refused to it; no certificate, a spoke's certificate and a
// workload's certificate do not get through the handshake; the plain admin
// port keeps only health and metrics.
func TestOperatorAdminIsScoped(t *testing.T) {
	op := harness.FreePort(t)
	h := &hub{t: t, admin: harness.FreePort(t), spokes: harness.FreePort(t), xds: harness.FreePort(t), state: t.TempDir(),
		extraArgs: []string{"--ca.meshes", "default=cluster.local,other=other.example", "--admin.operator-listen", addr(op)}}
	h.start()
	base := "https://" + addr(op)

	vendorDir, vendor := issueOperator(t, h, "--vendor", "--name", "root")
	tenantDir, tenant := issueOperator(t, h, "--mesh", "other", "--name", "alice")
	vc, tc := operatorClient(t, h, &vendor), operatorClient(t, h, &tenant)

	s1 := startSecureSpoke(t, h, "spoke-c1", "", "c1", h.token(t, "default", "c1", "1h"))
	startSecureSpoke(t, h, "spoke-c2", "other", "c2", h.token(t, "other", "c2", "1h"))
	testwait.For(t, 30*time.Second, func() error {
		var list []ingest.ClusterStatus
		code, body, err := get(vc, base+"/debug/spokes")
		if err != nil || code != 200 || json.Unmarshal([]byte(body), &list) != nil {
			return fmt.Errorf("vendor /debug/spokes: %d %v %s", code, err, body)
		}
		synced := 0
		for _, c := range list {
			if c.Connected && c.Synced {
				synced++
			}
		}
		if synced != 2 {
			return fmt.Errorf("%d of 2 clusters synced: %+v", synced, list)
		}
		return nil
	})
	for _, p := range []struct{ mesh, td, node string }{{"default", "cluster.local", "p-default"}, {"other", "other.example", "p-other"}} {
		cert := h.workloadCert(t, p.mesh, p.td, "shop", "web")
		if _, err := adsFirst(t, dialTLS(t, addr(h.xds), h.servingRoots(t), &cert), grpcNode(p.node, nil)); err != nil {
			t.Fatalf("proxy of %s: %v", p.mesh, err)
		}
	}

	// The vendor sees both meshes' clusters and proxies.
	var conns []ads.ConnStatus
	testwait.For(t, 10*time.Second, func() error {
		code, body, err := get(vc, base+"/debug/syncz")
		if err != nil || code != 200 || json.Unmarshal([]byte(body), &conns) != nil || len(conns) != 2 {
			return fmt.Errorf("vendor /debug/syncz: %d %v %s", code, err, body)
		}
		return nil
	})
	var defaultProxy string
	for _, c := range conns {
		if c.Mesh == "default" {
			defaultProxy = c.ID
		}
	}
	for path, want := range map[string]string{"/debug/security": `"clusters"`, "/debug/pprof/": "goroutine", "/metrics": "nave_", "/debug/meshes": `"other"`} {
		if code, body, err := get(vc, base+path); err != nil || code != 200 || !strings.Contains(body, want) {
			t.Errorf("vendor %s: %d %v, want 200 with %s", path, code, err, want)
		}
	}
	if code, body, _ := get(vc, base+"/debug/config?proxy="+defaultProxy); code != 200 || !strings.Contains(body, `"mesh": "default"`) {
		t.Errorf("vendor /debug/config of the default mesh's proxy: %d %s", code, body)
	}

	// The tenant of mesh other sees other only.
	t.Run("tenant", func(t *testing.T) {
		for path, leak := range map[string]string{
			"/debug/spokes":                       `"mesh": "default"`,
			"/debug/syncz":                        `"mesh": "default"`,
			"/debug/meshes":                       `"mesh": "default"`,
			"/debug/services":                     `"default"`,
			"/debug/services?mesh=default":        `"hostname"`,
			"/debug/config?proxy=" + defaultProxy: `"resources"`,
			"/debug/config?proxy=p-default":       `"nodeId": "p-default"`,
			"/debug/config?proxy=p-":              `"nodeId": "p-default"`,
			"/debug/":                             `security`,
			"/debug/roots":                        `"mesh": "default"`,
		} {
			code, body, err := get(tc, base+path)
			if err != nil {
				t.Errorf("tenant %s: %v", path, err)
				continue
			}
			if strings.Contains(body, leak) {
				t.Errorf("tenant of mesh other asked %s and got the default mesh's data (%s): %d %s", path, leak, code, body)
			}
		}
		if code, body, _ := get(tc, base+"/debug/config?proxy=p-"); code != 200 || !strings.Contains(body, `"nodeId": "p-other"`) {
			t.Errorf("tenant /debug/config?proxy=p- (one proxy of its own mesh matches): %d %s", code, body)
		}
		if code, body, _ := get(tc, base+"/debug/roots"); code != 200 || !strings.Contains(body, `"mesh": "other"`) || !strings.Contains(body, `"role": "signing"`) {
			t.Errorf("tenant /debug/roots: %d %s; want its own mesh's roots", code, body)
		}
		if code, body, _ := get(tc, base+"/debug/spokes"); code != 200 || !strings.Contains(body, `"cluster": "c2"`) {
			t.Errorf("tenant /debug/spokes: %d %s; want its own cluster c2", code, body)
		}
		for _, path := range []string{"/debug/security", "/debug/pprof/", "/debug/pprof/goroutine", "/metrics"} {
			if code, body, err := get(tc, base+path); err != nil || code != http.StatusForbidden || !strings.Contains(body, "vendor") {
				t.Errorf("tenant %s: %d %v %s; want 403 for the vendor only", path, code, err, body)
			}
		}
	})

	// Without an operator certificate, nothing: no certificate, a spoke's,
	// a workload's.
	t.Run("attacks", func(t *testing.T) {
		b, err := os.ReadFile(filepath.Join(s1.state, "credentials.pem"))
		if err != nil {
			t.Fatal(err)
		}
		spokeCert, err := tls.X509KeyPair(b, b)
		if err != nil {
			t.Fatal(err)
		}
		workload := h.workloadCert(t, "default", "cluster.local", "nave-system", "root")
		for name, cert := range map[string]*tls.Certificate{"no certificate": nil, "a spoke's certificate": &spokeCert, "a workload's certificate": &workload} {
			code, body, err := get(operatorClient(t, h, cert), base+"/debug/spokes")
			if err == nil {
				t.Errorf("%s got through: %d %s", name, code, body)
			}
		}
	})

	// An operator's certificate is nobody on the spokes and xds listeners.
	if _, err := pushClaiming(t, dialTLS(t, addr(h.spokes), h.servingRoots(t), &vendor), "default", "c9"); err == nil {
		t.Error("the vendor operator's certificate pushed as a spoke")
	}
	if _, err := adsFirst(t, dialTLS(t, addr(h.xds), h.servingRoots(t), &vendor), grpcNode("p-operator", nil)); err == nil {
		t.Error("the vendor operator's certificate was served xDS")
	}

	// The plain admin port keeps probes and metrics, and no debug view.
	for path, want := range map[string]int{"/healthz/ready": 200, "/metrics": 200, "/debug/spokes": 404, "/debug/pprof/": 404, "/debug/": 404} {
		if code, _, err := get(http.DefaultClient, h.url(path)); err != nil || code != want {
			t.Errorf("plain admin %s: %d %v, want %d", path, code, err, want)
		}
	}

	// navectl reads the operator listener with its certificate, by scope.
	code, out, stderr := navectlExit(t, "status", "--hub-admin", base, "--operator-dir", tenantDir)
	if code != 0 || !strings.Contains(out, "c2") || strings.Contains(out, "c1") || strings.Contains(out, "default") {
		t.Errorf("navectl status as the tenant of other: exit %d:\n%s%s", code, out, stderr)
	}
	code, out, stderr = navectlExit(t, "proxy-status", "--hub-admin", base, "--operator-dir", vendorDir)
	if code != 0 || !strings.Contains(out, "p-default") || !strings.Contains(out, "p-other") {
		t.Errorf("navectl proxy-status as the vendor: exit %d:\n%s%s", code, out, stderr)
	}
	code, _, stderr = navectlExit(t, "proxy-config", "clusters", "p-default", "--hub-admin", base, "--operator-dir", tenantDir)
	if code != 1 || !strings.Contains(stderr, "no connected proxy") {
		t.Errorf("navectl proxy-config of another mesh's proxy as a tenant: exit %d, %s", code, stderr)
	}
	code, _, stderr = navectlExit(t, "status", "--hub-admin", base)
	if code != 1 || !strings.Contains(stderr, "certificate") {
		t.Errorf("navectl status without an operator certificate: exit %d, %s", code, stderr)
	}
}
