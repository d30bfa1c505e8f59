package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/navemesh/nave/internal/testwait"
)

// manyServiceEntries is a spoke's config of n ServiceEntries, one
// endpoint each; its hosts are svc-I.demo.svc.cluster.local.
func manyServiceEntries(n int) (config string, hosts []string) {
	var b strings.Builder
	for i := range n {
		host := fmt.Sprintf("svc-%d.demo.svc.cluster.local", i)
		hosts = append(hosts, host)
		b.WriteString("---\n")
		b.WriteString(serviceEntry(fmt.Sprintf("svc-%d", i), host, 20000+i))
	}
	return b.String(), hosts
}

// TestReconnectResumes runs two hub replicas and an enrolled file spoke
// of 300 ServiceEntries that reaches hub-0 first (through a proxy), and a
// delta ADS client on hub-1 that records every removal. SIGKILL of hub-0:
// the spoke re-homes to hub-1, which holds the cluster from hub-0's relay,
// so the new stream resumes — the bytes hub-1 receives on it are a small
// fraction of the full state (nothing but Resume and the synced marker)
// and the spoke sends no resource. Then hub-1 restarts with no state: the
// spoke's next stream asks to resume, is refused, and sends the full
// state. The client sees no removal throughout.
func TestReconnectResumes(t *testing.T) {
	rs := newReplicaSet(t, 2)
	h0, h1 := rs.hubs[0], rs.hubs[1]
	h0.waitMembers(t, "hub-0,hub-1")
	h1.waitMembers(t, "hub-1,hub-0")
	config, hosts := manyServiceEntries(300)
	p := startProxy(t, addr(h0.spokes), addr(h1.spokes))
	via := *h0
	via.spokes = p.port()
	sp := startEnrolledSpoke(t, &via, "spoke-c1", "", "c1", config, h0.token(t, "default", "c1", "1h"), t.TempDir())
	h0.waitOwned(t, "default/c1", "hub-0")
	testwait.For(t, 30*time.Second, func() error {
		if c := h1.spokesView(t)["default/c1"]; c.Owner != "hub-0" || !c.Relayed || !c.Synced {
			return fmt.Errorf("hub-1 does not hold c1 from hub-0's relay: %+v", c)
		}
		return nil
	})
	sent := func() (bytes, resources float64) {
		return scrape(t, sp.url("/metrics"), "nave_spoke_uplink_sent_bytes_total"), scrape(t, sp.url("/metrics"), "nave_spoke_uplink_resources_total")
	}
	fullBytes, fullResources := sent()
	if fullResources != 300 {
		t.Fatalf("the first stream sent %g resources, want the full 300", fullResources)
	}

	roots := h1.servingRoots(t)
	cert := h0.workloadCert(t, "default", "cluster.local", "demo", "watcher")
	w := startWatchers(t, func() *grpc.ClientConn { return dialTLS(t, addr(h1.xds), roots, &cert) })[0]
	testwait.For(t, 60*time.Second, func() error { return w.holds(hosts...) })
	const received = `nave_hub_ingest_received_bytes_total{stream="spoke"}`
	before := scrape(t, h1.url("/metrics"), received)

	// The owner dies: the spoke re-homes to hub-1 and resumes.
	killed := time.Now()
	h0.proc.Kill()
	<-h0.proc.Done()
	h1.waitOwned(t, "default/c1", "hub-1")
	testwait.For(t, 30*time.Second, func() error {
		if n := scrape(t, sp.url("/metrics"), `nave_spoke_uplink_resumes_total{result="resumed"}`); n != 1 {
			return fmt.Errorf("the spoke resumed %g times", n)
		}
		return nil
	})
	t.Logf("re-home with resume: c1 synced on hub-1 %s after SIGKILL of hub-0", time.Since(killed).Round(time.Millisecond))
	got := scrape(t, h1.url("/metrics"), received) - before
	againBytes, againResources := sent()
	t.Logf("full state: %g bytes sent by the spoke; resumed stream: %g bytes received by hub-1, %g sent by the spoke", fullBytes, got, againBytes-fullBytes)
	if got <= 0 || got*10 > fullBytes {
		t.Errorf("hub-1 received %g bytes on the resumed stream; the full state is %g: want more than none and under 10 %%", got, fullBytes)
	}
	if n := againResources - fullResources; n != 0 {
		t.Errorf("the resumed stream sent %g resources, want 0", n)
	}
	if n := scrape(t, h1.url("/metrics"), `nave_hub_ingest_resume_requests_total{result="resumed",stream="spoke"}`); n != 1 {
		t.Errorf("hub-1 counted %g resumed spoke streams, want 1", n)
	}
	if !h1.spokesView(t)["default/c1"].Resumed {
		t.Error("/debug/spokes does not show c1 resumed")
	}

	// hub-1 restarts and holds nothing: the spoke sends its full state.
	h1.proc.Kill()
	<-h1.proc.Done()
	h1.start()
	h1.waitOwned(t, "default/c1", "hub-1")
	if n := scrape(t, h1.url("/metrics"), `nave_hub_ingest_resume_requests_total{result="full",stream="spoke"}`); n != 1 {
		t.Errorf("the restarted hub-1 answered %g resume requests with a request for the full state, want 1", n)
	}
	if got := scrape(t, h1.url("/metrics"), received); got*10 < fullBytes*9 {
		t.Errorf("the restarted hub-1 received %g bytes, want about the full state (%g)", got, fullBytes)
	}
	if _, res := sent(); res-againResources != 300 {
		t.Errorf("after the hub restart the spoke sent %g resources, want the full 300", res-againResources)
	}
	testwait.For(t, 60*time.Second, func() error {
		w.mu.Lock()
		n := w.streams
		w.mu.Unlock()
		if n < 2 {
			return fmt.Errorf("the client has not been answered by the restarted hub-1 (%d streams)", n)
		}
		return w.holds(hosts...)
	})
	checkNoRemovals(t, []*watcher{w}, func(int) string { return "the client of hub-1" }, addService(t, sp.dir))
	assertMetricsDocumented(t, h1.url("/metrics"))
}
