package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/shared/typeurl"
)

// watcher is a proxyless delta ADS client of the hub's clusters that
// reconnects whenever its stream ends, telling the hub what it holds
// (initial_resource_versions), and records every removal it is sent.
type watcher struct {
	mu       sync.Mutex
	held     map[string]string // cluster name -> version
	removals []string
	streams  int // streams that got a first response
	// answered is when the latest stream got its first response.
	answered time.Time
}

func (w *watcher) run(ctx context.Context, dial func() *grpc.ClientConn) {
	for ctx.Err() == nil {
		w.stream(ctx, dial())
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (w *watcher) stream(ctx context.Context, conn *grpc.ClientConn) {
	defer conn.Close()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		return
	}
	w.mu.Lock()
	req := &discoveryv3.DeltaDiscoveryRequest{Node: grpcNode("watcher", nil), TypeUrl: typeurl.Cluster,
		ResourceNamesSubscribe: []string{"*"}, InitialResourceVersions: map[string]string{}}
	for n, v := range w.held {
		req.InitialResourceVersions[n] = v
	}
	w.mu.Unlock()
	if stream.Send(req) != nil {
		return
	}
	first := true
	for {
		resp, err := stream.Recv()
		if err != nil {
			return
		}
		w.mu.Lock()
		if first {
			w.streams++
			w.answered = time.Now()
			first = false
		}
		for _, r := range resp.GetResources() {
			w.held[r.GetName()] = r.GetVersion()
		}
		for _, n := range resp.GetRemovedResources() {
			delete(w.held, n)
			w.removals = append(w.removals, n)
		}
		w.mu.Unlock()
		if stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeurl.Cluster, ResponseNonce: resp.GetNonce()}) != nil {
			return
		}
	}
}

// startWatchers runs a watcher per dial, each reconnecting through its
// dial until the test ends.
func startWatchers(t *testing.T, dials ...func() *grpc.ClientConn) []*watcher {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	ws := make([]*watcher, len(dials))
	for i, dial := range dials {
		w := &watcher{held: map[string]string{}}
		ws[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(ctx, dial)
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	return ws
}

// markers numbers the marker services of checkNoRemovals.
var markers atomic.Int64

// checkNoRemovals proves that no watcher received a removal, by a later
// event rather than a wait (internal/testwait): add puts a marker service
// named name, of host, into a spoke's config, and once every watcher holds
// the marker's cluster, a removal sent before it has arrived. It then
// fails for every watcher that received one; name(i) names watcher i's
// client.
func checkNoRemovals(t *testing.T, ws []*watcher, name func(i int) string, add func(name, host string)) {
	t.Helper()
	marker := fmt.Sprintf("marker-%d", markers.Add(1))
	host := marker + ".demo.svc.cluster.local"
	add(marker, host)
	for i, w := range ws {
		testwait.For(t, 60*time.Second, func() error {
			if err := w.holds(host); err != nil {
				return fmt.Errorf("%s: %v", name(i), err)
			}
			return nil
		})
	}
	for i, w := range ws {
		w.mu.Lock()
		if len(w.removals) > 0 {
			t.Errorf("%s received removals no spoke made: %v", name(i), w.removals)
		}
		w.mu.Unlock()
	}
}

// holds reports whether the watcher holds a cluster of every host.
func (w *watcher) holds(hosts ...string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, h := range hosts {
		if !slices.ContainsFunc(mapKeys(w.held), func(n string) bool { return strings.HasSuffix(n, "||"+h) }) {
			return fmt.Errorf("no cluster of %s among %v", h, mapKeys(w.held))
		}
	}
	return nil
}

// addService returns an add for checkNoRemovals that appends the service to
// the config of the file spoke serving dir.
func addService(t *testing.T, dir string) func(name, host string) {
	return func(name, host string) {
		t.Helper()
		path := filepath.Join(dir, "config.yaml")
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, path, strings.TrimRight(string(b), "\n")+"\n---\n"+serviceEntry(name, host, 17999))
	}
}

func mapKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func serviceEntry(name, host string, port int) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: %s, namespace: demo}
spec:
  hosts: [%s]
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  endpoints: [{address: 127.0.0.1, ports: {grpc: %d}}]
`, name, host, port)
}

// TestRestartedHubWaitsForEveryEnrolledCluster restarts a hub with two
// enrolled clusters, one of whose spokes comes back 5 s after the other: a
// client that held both clusters' services is never told one was removed,
// because the restarted hub serves the mesh only once every enrolled
// cluster has synced (or ingest.startupGrace passed); meanwhile
// /debug/spokes lists the late cluster as missing (issue 14, invariant 8).
func TestRestartedHubWaitsForEveryEnrolledCluster(t *testing.T) {
	const hostA, hostB = "svc-a.demo.svc.cluster.local", "svc-b.demo.svc.cluster.local"
	h := &hub{t: t, admin: harness.FreePort(t), spokes: harness.FreePort(t), xds: harness.FreePort(t),
		state: t.TempDir(), extraArgs: []string{"--ingest.startup-grace", "60s"}}
	h.start()
	stateA, stateB := t.TempDir(), t.TempDir()
	a := startEnrolledSpoke(t, h, "spoke-c1", "", "c1", serviceEntry("svc-a", hostA, 17081), h.token(t, "default", "c1", "1h"), stateA)
	b := startEnrolledSpoke(t, h, "spoke-c2", "", "c2", serviceEntry("svc-b", hostB, 17082), h.token(t, "default", "c2", "1h"), stateB)
	h.waitSynced(t, "default/c1")
	h.waitSynced(t, "default/c2")

	roots := h.servingRoots(t)
	cert := h.workloadCert(t, "default", "cluster.local", "demo", "watcher")
	w := startWatchers(t, func() *grpc.ClientConn { return dialTLS(t, addr(h.xds), roots, &cert) })[0]
	testwait.For(t, 30*time.Second, func() error { return w.holds(hostA, hostB) })

	// The hub dies; so does c2's spoke, which comes back 5 s after the hub.
	b.proc.Stop(5 * time.Second)
	h.proc.Kill()
	<-h.proc.Done()
	h.start()
	h.waitSynced(t, "default/c1")
	if st := h.spokesView(t)["default/c2"]; st.Missing == nil {
		t.Errorf("while c2 is away /debug/spokes shows it as %+v, want missing", st)
	}
	// c2 comes back once the watcher's new stream waits at the restarted
	// hub, unanswered while c2 is missing.
	testwait.For(t, 30*time.Second, func() error {
		if n := scrape(t, h.url("/metrics"), "nave_xds_connections"); n < 1 {
			return fmt.Errorf("the watcher has not reached the restarted hub (%g connections)", n)
		}
		return nil
	})
	w.mu.Lock()
	if w.streams != 1 {
		t.Errorf("the watcher was answered %d times with c2 missing, want once (by the hub before its restart)", w.streams)
	}
	w.mu.Unlock()
	startEnrolledSpoke(t, h, "spoke-c2", "", "c2", serviceEntry("svc-b", hostB, 17082), "used", stateB)
	h.waitSynced(t, "default/c2")

	testwait.For(t, 30*time.Second, func() error {
		w.mu.Lock()
		n := w.streams
		w.mu.Unlock()
		if n < 2 {
			return fmt.Errorf("the watcher has not been answered by the restarted hub (%d streams)", n)
		}
		return w.holds(hostA, hostB)
	})
	checkNoRemovals(t, []*watcher{w}, func(int) string { return "the client across the restart" }, addService(t, a.dir))
}
