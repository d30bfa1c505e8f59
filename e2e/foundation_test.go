package e2e

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/internal/testwait"
)

func meshYAML(backends []*backend) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: demo}
spec:
  hosts: [%s]
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  location: MESH_INTERNAL
  resolution: STATIC
  workloadSelector: {labels: {app: echo}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: demo}
spec:
  host: %s
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
  - {name: v3, labels: {version: v3}}
`, echoHost, echoHost)
	for i, be := range backends {
		fmt.Fprintf(&b, `---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: %s, namespace: demo}
spec:
  address: 127.0.0.1
  ports: {grpc: %d}
  labels: {app: echo, version: v%d}
  locality: us-east/zone-%c
`, be.name, be.port, i+1, 'a'+i)
	}
	return b.String()
}

func routeYAML(w1, w2 int) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: demo}
spec:
  hosts: [%s]
  http:
  - name: beta-users
    match: [{headers: {x-user: {exact: beta}}}]
    route: [{destination: {host: %s, subset: v3}}]
  - name: split
    route:
    - {destination: {host: %s, subset: v1}, weight: %d}
    - {destination: {host: %s, subset: v2}, weight: %d}
    timeout: 5s
    retries: {attempts: 2, retryOn: unavailable}
`, echoHost, echoHost, echoHost, w1, echoHost, w2)
}

// waitRouteChange waits for node to ACK a route version other than prev
// and returns the new one.
func waitRouteChange(t *testing.T, h *hub, node, prev string) string {
	t.Helper()
	var v string
	testwait.For(t, 20*time.Second, func() error {
		var err error
		if v, err = routeVersion(h, node); err != nil {
			return err
		}
		if v == "" || v == prev {
			return fmt.Errorf("route version still %q", v)
		}
		return nil
	})
	return v
}

// TestFoundation runs the foundation scenarios with the spoke pushing to
// the hub and with the hub polling the spoke: the same protocol, either
// side dialling.
func TestFoundation(t *testing.T) {
	for _, mode := range hubModes {
		t.Run(mode, func(t *testing.T) { testFoundation(t, mode) })
	}
}

func testFoundation(t *testing.T, mode string) {
	backends := []*backend{startBackend(t, "echo-v1"), startBackend(t, "echo-v2"), startBackend(t, "echo-v3")}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "mesh.yaml"), meshYAML(backends))
	vsPath := filepath.Join(dir, "routes", "echo-vs.yaml")
	if err := mkdirAll(filepath.Dir(vsPath)); err != nil {
		t.Fatal(err)
	}
	writeFile(t, vsPath, routeYAML(80, 20))

	polled := pollArgs(t, mode, "default", "cluster-a")
	h := newHub(t, polled.hubArgs...)
	sp := newSpoke(t, h, "cluster-a", dir, polled.spokeArgs...)
	target := "xds:///" + echoHost + ":7070"
	plain := startClient(t, h, target, "plain.demo")
	beta := startClient(t, h, target, "beta.demo", "--header", "x-user=beta")

	if polled.port != 0 {
		t.Run("the hub dials the spoke", func(t *testing.T) { waitPolled(t, h, sp, "default/cluster-a", 1) })
	}

	t.Run("split and header route", func(t *testing.T) {
		assertEchoRoutes(t, plain, beta)
	})

	t.Run("edit follows", func(t *testing.T) {
		prev, err := routeVersion(h, "plain.demo")
		if err != nil {
			t.Fatal(err)
		}
		var lat []time.Duration
		weights := [][2]int{{20, 80}, {80, 20}, {20, 80}, {80, 20}, {20, 80}}
		for _, w := range weights {
			edited := time.Now()
			writeFile(t, vsPath, routeYAML(w[0], w[1]))
			prev = waitRouteChange(t, h, "plain.demo", prev)
			lat = append(lat, time.Since(edited))
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		t.Logf("file edit -> client ACKed new routes: median %s (min %s, max %s, n=%d)",
			lat[len(lat)/2].Round(time.Millisecond), lat[0].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond), len(lat))
		// The last edit is 20/80: the traffic follows.
		assertSplit(t, plain.collect(t, time.Now(), 600, 30*time.Second), "echo-v1", "echo-v2", 0.2)
	})

	t.Run("invalid VirtualService is rejected, traffic keeps last good", func(t *testing.T) {
		bad := filepath.Join(dir, "routes", "bad-vs.yaml")
		writeFile(t, bad, `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: broken, namespace: demo}
spec:
  hosts: [`+echoHost+`]
  http:
  - route:
    - {destination: {host: `+echoHost+`, subset: v1}, weight: 50}
    - {destination: {host: `+echoHost+`, subset: v2}, weight: 40}
`)
		var rejected []struct {
			File   string `json:"file"`
			Index  int    `json:"index"`
			Name   string `json:"name"`
			Reason string `json:"reason"`
			Field  string `json:"field"`
		}
		testwait.For(t, 10*time.Second, func() error {
			if err := harness.GetJSON(sp.url("/debug/rejected"), &rejected); err != nil {
				return err
			}
			for _, r := range rejected {
				if strings.HasSuffix(r.File, "bad-vs.yaml") && r.Name == "broken" && strings.Contains(r.Reason+r.Field, "100") {
					return nil
				}
			}
			return fmt.Errorf("rejections: %+v", rejected)
		})
		t.Logf("spoke reports: %+v", rejected)
		assertSplit(t, plain.collect(t, time.Now(), 400, 30*time.Second), "echo-v1", "echo-v2", 0.2)

		// A broken edit of the VirtualService in use: the spoke keeps its
		// last good version, and traffic keeps the 20/80 split.
		writeFile(t, vsPath, routeYAML(50, 40))
		testwait.For(t, 10*time.Second, func() error {
			if err := harness.GetJSON(sp.url("/debug/rejected"), &rejected); err != nil {
				return err
			}
			for _, r := range rejected {
				if r.Name == "echo" && strings.Contains(r.Reason, "last good version is kept") {
					return nil
				}
			}
			return fmt.Errorf("rejections: %+v", rejected)
		})
		assertSplit(t, plain.collect(t, time.Now(), 400, 30*time.Second), "echo-v1", "echo-v2", 0.2)
		writeFile(t, vsPath, routeYAML(20, 80))
	})

	t.Run("hub killed and restarted", func(t *testing.T) {
		h.proc.Kill()
		down := time.Now()
		// The client keeps serving on its last config while the hub is gone.
		calls := plain.collect(t, down, 300, 30*time.Second)
		if got := tally(calls); got["echo-v1"]+got["echo-v2"] != len(calls) {
			t.Fatalf("calls while the hub was down: %s", describe(got))
		}
		h.start()
		// The spoke reconnects by itself and syncs (polled: the hub dials
		// it again).
		testwait.For(t, 30*time.Second, func() error {
			var spokes []struct {
				Cluster string `json:"cluster"`
				Synced  bool   `json:"synced"`
			}
			if err := harness.GetJSON(h.url("/debug/spokes"), &spokes); err != nil {
				return err
			}
			if len(spokes) != 1 || !spokes[0].Synced {
				return fmt.Errorf("spokes: %+v", spokes)
			}
			return nil
		})
		if polled.port != 0 {
			waitPolled(t, h, sp, "default/cluster-a", 2)
		}
		// The client reconnects too, and follows a new edit.
		var prev string
		testwait.For(t, 30*time.Second, func() error {
			var err error
			prev, err = routeVersion(h, "plain.demo")
			if err == nil && prev == "" {
				err = fmt.Errorf("no routes ACKed yet")
			}
			return err
		})
		writeFile(t, vsPath, routeYAML(50, 50))
		waitRouteChange(t, h, "plain.demo", prev)
		assertSplit(t, plain.collect(t, time.Now(), 400, 30*time.Second), "echo-v1", "echo-v2", 0.5)
	})

	t.Run("shutdown leaves nothing behind", func(t *testing.T) {
		procs := []*harness.Proc{plain.proc, beta.proc, sp.proc, h.proc}
		for _, p := range procs {
			p.Stop(10 * time.Second)
			if code := p.ExitCode(); code != 0 {
				t.Errorf("%s exited with %d after SIGTERM", p.Name, code)
			}
		}
		ports := []int{h.admin, h.spokes, h.xds, sp.admin}
		if polled.port != 0 {
			ports = append(ports, polled.port)
		}
		for _, port := range ports {
			if !harness.PortFree(port) {
				t.Errorf("port %d still bound after shutdown", port)
			}
		}
	})
}

// waitPolled waits until the hub streams with polled spoke id (its
// /debug/polled) and the spoke says it is polled, synced, on its
// sessions-th stream at least.
func waitPolled(t *testing.T, h *hub, sp *spoke, id string, sessions int) {
	t.Helper()
	testwait.For(t, 30*time.Second, func() error {
		var targets []struct {
			Mesh, Cluster, State string
			Streams              int
		}
		if err := harness.GetJSON(h.url("/debug/polled"), &targets); err != nil {
			return err
		}
		if len(targets) != 1 || targets[0].Mesh+"/"+targets[0].Cluster != id || targets[0].State != "streaming" || targets[0].Streams < 1 {
			return fmt.Errorf("hub /debug/polled: %+v", targets)
		}
		var up struct {
			Mode, PolledBy, State string
			Sessions              int
		}
		if err := harness.GetJSON(sp.url("/debug/uplink"), &up); err != nil {
			return err
		}
		if up.Mode != "polled" || up.PolledBy == "" || up.State != "synced" || up.Sessions < sessions {
			return fmt.Errorf("spoke /debug/uplink: %+v, want polled, synced, %d sessions", up, sessions)
		}
		return nil
	})
}
