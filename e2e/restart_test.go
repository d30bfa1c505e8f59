package e2e

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/internal/testwait"
)

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
