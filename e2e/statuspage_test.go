package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/hub/statuspage"
	"github.com/navemesh/nave/internal/testenv"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/ads"
	"github.com/navemesh/nave/xds/mesh"
)

// chromiumPath finds a Chromium to drive: $NAVE_CHROMIUM, else Debian's
// chromium (.ci/run installs it). Without one the test skips, unless
// NAVE_REQUIRE_TEST_ENV is set (CI sets it), when it fails (internal/testenv).
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("NAVE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testenv.Missing(t, "no Chromium: install Debian's chromium package (apt-get install -y chromium, as .ci/run does) or set NAVE_CHROMIUM")
	return "" // not reached: Missing ends the test
}

// browser is a headless Chromium with one tab, and what its pages wrote
// to the console.
type browser struct {
	ctx  context.Context
	mu   sync.Mutex
	logs []chromedp.ConsoleMessage
}

// startBrowser starts Chromium; the test's cleanup stops it through
// chromedp's allocator and checks that none of its processes remain.
func startBrowser(t *testing.T) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.NoSandbox, // tests may run as root, where Chromium's sandbox refuses to start
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	b := &browser{ctx: ctx}
	messages := chromedp.Console(ctx) // starts the browser
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.logs = append(b.logs, m)
			b.mu.Unlock()
		}
	}()
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		cancelTab()
		cancelAlloc()
		t.Fatalf("starting %s: %v", chromiumPath(t), err)
	}
	proc := chromedp.FromContext(ctx).Browser.Process()
	if proc == nil {
		t.Fatal("chromedp started no browser process")
	}
	t.Cleanup(func() {
		pids := descendants(proc.Pid)
		cancelTab()
		cancelAlloc() // kills the browser and waits for it
		testwait.For(t, 10*time.Second, func() error {
			var alive []int
			for _, pid := range pids {
				if running(pid) {
					alive = append(alive, pid)
				}
			}
			if len(alive) > 0 {
				return fmt.Errorf("Chromium processes still running after the allocator's cancel: %v", alive)
			}
			return nil
		})
		t.Logf("Chromium (pid %d) and its %d child processes stopped", proc.Pid, len(pids)-1)
	})
	return b
}

// errors returns the console errors, exceptions and browser log errors
// (failed loads, refused by the page's Content-Security-Policy) so far.
func (b *browser) errors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, m := range b.logs {
		if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException || m.Type == chromedp.ConsoleWarning {
			out = append(out, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line+1))
		}
	}
	return out
}

// waitFor waits until the JavaScript expression is true in the page.
func (b *browser) waitFor(t *testing.T, what, expr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		body, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("the page does not show %s in 20 s (%v); it shows:\n%s", what, err, body)
	}
}

// text evaluates a JavaScript expression that yields a string.
func (b *browser) text(t *testing.T, expr string) string {
	t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return s
}

// screenshot writes the whole page as PNG into a directory that outlives
// the test, and returns its path.
func (b *browser) screenshot(t *testing.T, name string) string {
	t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "nave-status-")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// descendants returns pid and every process below it.
func descendants(pid int) []int {
	parent := map[int]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(fields) > 1 {
			pp, _ := strconv.Atoi(fields[1])
			parent[p] = pp
		}
	}
	out := []int{pid}
	for changed := true; changed; {
		changed = false
		for p, pp := range parent {
			if contains(out, pp) && !contains(out, p) {
				out = append(out, p)
				changed = true
			}
		}
	}
	return out
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// running reports whether pid is a live process (not gone, not a zombie).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}

// nackNext subscribes the proxy to typeURL and NACKs the response.
func nackNext(t *testing.T, p *adsClient, typeURL, reason string) {
	t.Helper()
	if err := p.stream.Send(&discoveryv3.DiscoveryRequest{Node: p.node, TypeUrl: typeURL}); err != nil {
		t.Fatal(err)
	}
	got := make(chan *discoveryv3.DiscoveryResponse, 1)
	go func() {
		for {
			r, err := p.stream.Recv()
			if err != nil {
				close(got)
				return
			}
			if r.GetTypeUrl() == typeURL {
				got <- r
				return
			}
		}
	}()
	var resp *discoveryv3.DiscoveryResponse
	select {
	case resp = <-got:
	case <-time.After(20 * time.Second):
		t.Fatalf("no %s response in 20 s", typeURL)
	}
	if resp == nil {
		t.Fatalf("the stream ended before a %s response", typeURL)
	}
	if err := p.stream.Send(&discoveryv3.DiscoveryRequest{Node: p.node, TypeUrl: typeURL, ResponseNonce: resp.GetNonce(),
		ErrorDetail: &statuspb.Status{Code: 3, Message: reason}}); err != nil {
		t.Fatal(err)
	}
}

// proxyState is a JavaScript expression: the state the page shows for one
// proxy and type ("" when it shows none).
func proxyState(node, typ string) string {
	n, _ := json.Marshal(node)
	ty, _ := json.Marshal(typ)
	return fmt.Sprintf(`([...document.querySelectorAll("tr[data-proxy]")].find(r => r.dataset.proxy === %s)`+
		`?.querySelector("td[data-type=" + JSON.stringify(%s) + "]")?.dataset.state) || ""`, n, ty)
}

// TestStatusPageInChromium opens the hub's status page in a real headless
// Chromium: it loads with no console error (nothing refused by its
// Content-Security-Policy, no failed load, no exception), shows a connected
// proxy's sync state per type as navectl proxy-status names it, and follows
// config changes by itself (auto-refresh): a new file at the spoke brings
// a service and config problems, a second cluster a cross-cluster
// conflict. Then the same page on canned views shows rejected resources,
// a withdrawn cluster and markup in names as text.
func TestStatusPageInChromium(t *testing.T) {
	b := startBrowser(t)

	h := newHub(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "reviews.yaml"), reviewsYAML("2026-03-01T00:00:00Z", "v1"))
	newSpoke(t, h, "c1", dir)
	testwait.For(t, 20*time.Second, func() error { return spokeSynced(h, "c1", true) })
	node := "sidecar~10.9.0.1~web-1.shop~shop.svc.cluster.local"
	p := dialADS(t, h, node)
	p.fetch(t, typeurl.Cluster)
	nackNext(t, p, typeurl.Listener, "test: listener refused")

	if err := chromedp.Do(b.ctx, chromedp.Navigate(h.url("/status/"))); err != nil {
		t.Fatal(err)
	}
	b.waitFor(t, "the proxy's NACK", proxyState(node, "Listener")+` === "NACKED"`)
	for typ, want := range map[string]string{"Cluster": "SYNCED", "Listener": "NACKED", "ClusterLoadAssignment": "NOT SENT", "Secret": "NOT SENT"} {
		if got := b.text(t, proxyState(node, typ)); got != want {
			t.Errorf("the page shows %s %s, want %s", typ, got, want)
		}
	}
	if got := b.text(t, `document.querySelector('tr[data-proxy] td[data-type="Listener"]').innerText`); !strings.Contains(got, "test: listener refused") {
		t.Errorf("the NACKed cell shows %q, want the proxy's reason", got)
	}
	for what, expr := range map[string]string{
		"cluster c1 synced": `document.querySelector('section[data-mesh="default"] tr[data-cluster="c1"]').innerText.includes("synced")`,
		"service reviews":   `!!document.querySelector('tr[data-service="reviews.shop.svc.cluster.local"]')`,
	} {
		b.waitFor(t, what, expr)
	}
	// The same states, counted for Prometheus.
	metrics, err := httpGet(h.url("/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`nave_xds_proxy_sync_states{mesh="default",state="nacked",type="Listener"} 1`,
		`nave_xds_proxy_sync_states{mesh="default",state="synced",type="Cluster"} 1`,
		`nave_xds_proxy_sync_states{mesh="default",state="synced",type="Listener"} 0`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("hub metrics lack %s", want)
		}
	}
	refreshes := b.text(t, `document.body.dataset.refreshes`)

	// A config change at the spoke: the page shows it without a reload.
	writeFile(t, filepath.Join(dir, "broken.yaml"), brokenYAML)
	b.waitFor(t, "the new service ratings", `!!document.querySelector('tr[data-service="ratings.shop.svc.cluster.local"]')`)
	b.waitFor(t, "the broken VirtualService's problems", `[...document.querySelectorAll('tr[data-problem]')].some(r => r.innerText.includes("nowhere.example.com"))`)
	// The proxy was sent the new clusters and has not answered.
	b.waitFor(t, "the proxy's CDS as STALE", proxyState(node, "Cluster")+` === "STALE"`)
	// A second cluster with a different VirtualService of the same name: a conflict.
	dir2 := t.TempDir()
	writeFile(t, filepath.Join(dir2, "reviews.yaml"), reviewsYAML("2026-01-01T00:00:00Z", "v2"))
	newSpoke(t, h, "c2", dir2)
	b.waitFor(t, "the conflict over shop/reviews", `(document.querySelector('tr[data-conflict="shop/reviews"]') || {innerText: ""}).innerText.includes("c2")`)
	if now := b.text(t, `document.body.dataset.refreshes`); now == refreshes {
		t.Errorf("the page did not refresh (still %s refreshes)", now)
	}
	// The filter box narrows proxies and services, and keeps doing so across refreshes.
	if err := chromedp.Do(b.ctx, chromedp.SendKeys(chromedp.CSS("#filter"), "ratings")); err != nil {
		t.Fatal(err)
	}
	b.waitFor(t, "only the service ratings", `document.querySelectorAll("tr[data-service]").length === 1 && !!document.querySelector('tr[data-service="ratings.shop.svc.cluster.local"]') && !document.querySelector("tr[data-proxy]")`)
	after := b.text(t, `document.body.dataset.refreshes`)
	b.waitFor(t, "a refresh with the filter", `document.body.dataset.refreshes !== `+strconv.Quote(after)+` && document.querySelectorAll("tr[data-service]").length === 1`)
	if err := chromedp.Do(b.ctx, chromedp.Evaluate[chromedp.Void](`(f => { f.value = ""; f.dispatchEvent(new Event("input")); })(document.getElementById("filter"))`)); err != nil {
		t.Fatal(err)
	}
	b.waitFor(t, "every service and the proxy again", `document.querySelectorAll("tr[data-service]").length === 2 && !!document.querySelector("tr[data-proxy]")`)
	if err := chromedp.Do(b.ctx, chromedp.EmulateViewport(1280, 1000)); err != nil {
		t.Fatal(err)
	}
	shot := b.screenshot(t, "status.png")
	t.Logf("screenshot of the live status page: %s", shot)

	// Canned views: what a live hub does not easily show.
	b.cannedViews(t)

	errs := b.errors()
	// The console is really watched: an error written now is seen.
	if err := chromedp.Do(b.ctx, chromedp.Evaluate[chromedp.Void](`console.error("nave-console-probe")`)); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, func() error {
		if got := b.errors(); len(got) == len(errs) || !strings.Contains(got[len(got)-1], "nave-console-probe") {
			return fmt.Errorf("the console listener did not see console.error: %v", got)
		}
		return nil
	})
	if len(errs) > 0 {
		t.Errorf("the page wrote to the console:\n%s", strings.Join(errs, "\n"))
	}
}

// cannedViews serves the page with fixed debug views, built from the
// hub's own types: a cluster with resources the hub rejected, a withdrawn
// cluster, a proxy whose node ID holds markup (which must stay text).
func (b *browser) cannedViews(t *testing.T) {
	t.Helper()
	now := time.Now().UTC()
	evil := `<img src=x onerror="document.title='pwned'">`
	views := map[string]any{
		"spokes": []ingest.ClusterStatus{
			{State: ingest.State{ClusterIdentity: ingest.ClusterIdentity{Mesh: "acme", Cluster: "east"}, Connected: true, Synced: true, ConnectedAt: now, LastMessageAt: now,
				Acks: 3, Nacks: 1}, Resources: map[string]int{"ServiceEntry": 2}, Rejected: []meshconfig.Rejection{
				{Kind: "VirtualService", Namespace: "shop", Name: "bad", Reason: "spec.http[0]: a route needs a destination", At: now}}},
			{State: ingest.State{ClusterIdentity: ingest.ClusterIdentity{Mesh: "acme", Cluster: "west"}, ConnectedAt: now, LastMessageAt: now}, Stale: true,
				Withdrawn: &ingest.Withdrawal{At: now, Reason: "grace period over", Resources: 4}},
		},
		"syncz": []ads.ConnStatus{{ID: "1", NodeID: evil, Mesh: "acme", ProxyType: "sidecar", ConnectedAt: now,
			Types: map[string]ads.TypeStatus{"Cluster": {SentVersion: "2", AckedVersion: "1"}}}},
		"meshes": []map[string]any{{"mesh": "acme", "version": 7, "builtAt": now.Format(time.RFC3339), "services": 0,
			"conflicts": []mesh.Conflict{}, "problems": []mesh.Problem{}},
			// A mesh created at runtime that nothing has connected to yet,
			// and one being deleted: the registry's, without a push context.
			{"mesh": "fresh", "phase": "Active"}, {"mesh": "gone", "phase": "Deleting"}},
		"services": map[string]any{},
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+statuspage.Path, statuspage.Handler())
	for name, v := range views {
		mux.HandleFunc("GET /debug/"+name, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(v)
		})
	}
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	if err := chromedp.Do(b.ctx, chromedp.Navigate(ts.URL+statuspage.Path)); err != nil {
		t.Fatal(err)
	}
	b.waitFor(t, "the rejected VirtualService", `[...document.querySelectorAll('tr[data-rejected]')].some(r => r.innerText.includes("shop/bad") && r.innerText.includes("a route needs a destination"))`)
	b.waitFor(t, "the mesh without a push context", `document.querySelector('section[data-mesh="fresh"] h2').innerText.includes("no push context yet")`)
	b.waitFor(t, "the mesh being deleted", `document.querySelector('section[data-mesh="gone"] h2').innerText.includes("Deleting")`)
	b.waitFor(t, "cluster west withdrawn", `document.querySelector('tr[data-cluster="west"]').innerText.includes("withdrawn")`)
	if got := b.text(t, proxyState(evil, "Cluster")); got != "STALE" {
		t.Errorf("the proxy's CDS shows %q, want STALE", got)
	}
	if got := b.text(t, `document.querySelector('tr[data-proxy] code').textContent`); got != evil {
		t.Errorf("the node ID shows as %q, want the markup as text", got)
	}
	if n := b.text(t, `String(document.querySelectorAll("main img").length) + document.title`); n != "0nave hub status" {
		t.Errorf("markup in a node ID became elements or ran: %q", n)
	}
}

// TestStatusPageIsScoped opens the status page of a TLS hub with an
// operator listener and clusters of two meshes, in Chromium, through a
// loopback proxy that presents an operator's certificate (as a browser
// holding it would): the tenant of mesh other sees its cluster and not the
// default mesh's, the vendor both; the plain admin port does not serve the
// page.
func TestStatusPageIsScoped(t *testing.T) {
	b := startBrowser(t)
	op := harness.FreePort(t)
	h := &hub{t: t, admin: harness.FreePort(t), spokes: harness.FreePort(t), xds: harness.FreePort(t), state: t.TempDir(),
		extraArgs: []string{"--ca.meshes", "default=cluster.local,other=other.example", "--admin.operator-listen", addr(op)}}
	h.start()
	_, vendor := issueOperator(t, h, "--vendor", "--name", "root")
	_, tenant := issueOperator(t, h, "--mesh", "other", "--name", "alice")
	startSecureSpoke(t, h, "spoke-c1", "", "c1", h.token(t, "default", "c1", "1h"))
	startSecureSpoke(t, h, "spoke-c2", "other", "c2", h.token(t, "other", "c2", "1h"))
	base := "https://" + addr(op)
	testwait.For(t, 30*time.Second, func() error {
		var list []ingest.ClusterStatus
		code, body, err := get(operatorClient(t, h, &vendor), base+"/debug/spokes")
		if err != nil || code != 200 || json.Unmarshal([]byte(body), &list) != nil {
			return fmt.Errorf("vendor /debug/spokes: %d %v %s", code, err, body)
		}
		if len(list) != 2 || !list[0].Synced || !list[1].Synced {
			return fmt.Errorf("want clusters c1 and c2 synced: %+v", list)
		}
		return nil
	})

	// as opens the page through a proxy presenting cert.
	as := func(cert *tls.Certificate) {
		target, _ := url.Parse(base)
		rp := httputil.NewSingleHostReverseProxy(target)
		rp.Transport = operatorClient(t, h, cert).Transport
		ts := httptest.NewServer(rp)
		t.Cleanup(ts.Close)
		if err := chromedp.Do(b.ctx, chromedp.Navigate(ts.URL+statuspage.Path)); err != nil {
			t.Fatal(err)
		}
	}
	cluster := func(mesh, name string) string {
		return fmt.Sprintf(`!!document.querySelector('section[data-mesh="%s"] tr[data-cluster="%s"]')`, mesh, name)
	}
	as(&tenant)
	b.waitFor(t, "the tenant's cluster c2", cluster("other", "c2"))
	if got := b.text(t, `[...document.querySelectorAll("section[data-mesh]")].map(s => s.dataset.mesh).join(",") + " " + document.body.innerText.includes("c1")`); got != "other false" {
		t.Errorf("the tenant of mesh other sees meshes and c1: %q, want only mesh other", got)
	}
	as(&vendor)
	b.waitFor(t, "both meshes' clusters", cluster("other", "c2")+" && "+cluster("default", "c1"))

	if code, _, err := get(http.DefaultClient, h.url(statuspage.Path)); err != nil || code != http.StatusNotFound {
		t.Errorf("the plain admin port answers %s with %d %v, want 404 (the page is for operators)", statuspage.Path, code, err)
	}
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("the page wrote to the console:\n%s", strings.Join(errs, "\n"))
	}
}
