package ads_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/ads"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
)

// bigMesh has n services, so that a cluster response is large enough to
// fill gRPC's flow-control windows when nobody reads. tag changes every
// cluster's content.
func bigMesh(n int, tag string) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: svc-%[1]d, namespace: demo}
spec:
  hosts: [svc-%[1]d-%[2]s.demo.svc.cluster.local]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.%[3]d.%[4]d}]
`, i, tag, i/250, i%250+1)
	}
	return b.String()
}

// TestStuckProxyIsDisconnectedAndOthersKeepGoing: a proxy that stops
// reading is disconnected once a send waits longer than SendTimeout,
// while a reading proxy keeps receiving every update.
func TestStuckProxyIsDisconnectedAndOthersKeepGoing(t *testing.T) {
	f := newFixture(t, nil, func(o *ads.Options) { o.SendTimeout = 300 * time.Millisecond })
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, bigMesh(400, "a"))))

	// stuck subscribes and never reads again.
	stuck := f.open(t, dial(t, f.addr), node("stuck", "m"))
	stuck.Subscribe(typeurl.Cluster)
	ended := make(chan error, 1)
	go func() {
		for {
			if _, err := stuck.Stream.Recv(); err != nil {
				ended <- err
				return
			}
			<-t.Context().Done() // read the first response, then stop reading
		}
	}()

	live := f.connect(t, node("live", "m"))
	live.Subscribe(typeurl.Cluster)
	live.ACK(live.Next(typeurl.Cluster))

	// Updates until the stuck stream is cut; the live one gets each.
	// Meanwhile the stuck proxy shows as a pending push.
	deadline := time.Now().Add(waitFor)
	pending := 0.0
	for i := 0; f.metric(t, "nave_xds_stuck_disconnects_total") == 0; i++ {
		if time.Now().After(deadline) {
			t.Fatal("the stuck proxy was not disconnected")
		}
		f.set(t, "m", synced("c1", pushctxtest.Decode(t, bigMesh(400, fmt.Sprint("v", i)))))
		live.ACK(live.Next(typeurl.Cluster))
		pending = max(pending, f.metric(t, "nave_xds_pending_pushes"))
	}
	if pending < 1 {
		t.Error("nave_xds_pending_pushes never counted the stuck proxy")
	}
	testwait.Until(t, "no push pending with the stuck proxy gone and the live one served", func() bool {
		return f.metric(t, "nave_xds_pending_pushes") == 0
	})
	// The server ended the stuck stream: the connection is gone from the
	// status (the client itself sees it only once it reads again).
	testwait.Until(t, "the stuck proxy no longer listed as connected", func() bool {
		return !slices.ContainsFunc(f.ads.Status(), func(cs ads.ConnStatus) bool { return cs.NodeID == "stuck" })
	})
}

// TestConnectionStormIsAdmittedAtTheConfiguredRate: with a rate of 20 new
// streams per second and a burst of 2, ten proxies connecting at once are
// all served, the last no sooner than (10-2)/20 s after the first.
func TestConnectionStormIsAdmittedAtTheConfiguredRate(t *testing.T) {
	f := newFixture(t, nil, func(o *ads.Options) { o.AdmissionRate, o.AdmissionBurst = 20, 2 })
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, pushctxtest.EchoYAML(80, 20, "ROUND_ROBIN"))))
	start := time.Now()
	var wg sync.WaitGroup
	got := make([]time.Duration, 10)
	for i := range got {
		p := f.connect(t, node(fmt.Sprint("storm-", i), "m"))
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Subscribe(typeurl.Cluster)
			select {
			case <-p.Responses:
				got[i] = time.Since(start)
			case <-time.After(waitFor):
			}
		}()
	}
	wg.Wait()
	var last time.Duration
	for i, d := range got {
		if d == 0 {
			t.Fatalf("proxy %d was never served", i)
		}
		last = max(last, d)
	}
	if last < 350*time.Millisecond {
		t.Errorf("ten proxies were all served within %s; admission at 20/s with burst 2 needs at least 400 ms", last)
	}
}

// TestLargeResponsesShareTheSendBudget: with room for one large response
// at a time (held until the proxy answers it), five proxies connecting at
// once still all get their clusters, each large response took budget, and
// none is left taken.
func TestLargeResponsesShareTheSendBudget(t *testing.T) {
	f := newFixture(t, nil, func(o *ads.Options) { o.MaxInflightBytes = 1 })
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, bigMesh(1500, "a"))))
	var ps []*proxy
	for i := range 5 {
		p := f.connect(t, node(fmt.Sprint("p", i), "m"))
		p.Subscribe(typeurl.Cluster)
		ps = append(ps, p)
	}
	// Proxies answer independently, in whatever order the budget lets
	// their responses through.
	type answer struct {
		p *proxy
		r *discoveryv3.DiscoveryResponse
	}
	answers := make(chan answer, len(ps))
	for _, p := range ps {
		go func() {
			select {
			case r := <-p.Responses:
				answers <- answer{p, r}
			case <-t.Context().Done():
			}
		}()
	}
	deadline := time.After(waitFor)
	for got := 0; got < len(ps); got++ {
		select {
		case a := <-answers:
			if a.r.GetTypeUrl() != typeurl.Cluster || proto.Size(a.r) < 64<<10 {
				t.Fatalf("got a %s response of %d bytes; the test needs clusters of 64 KiB or more", a.r.GetTypeUrl(), proto.Size(a.r))
			}
			a.p.ACK(a.r)
		case <-deadline:
			t.Fatalf("%d of %d proxies got their clusters", got, len(ps))
		}
	}
	if n := f.metric(t, "nave_xds_send_budget_wait_seconds"); n != 5 {
		t.Errorf("%v large responses took send budget, want 5", n)
	}
	// The budget is held until each proxy answers; all five ACKed.
	testwait.Until(t, "no send budget taken once every proxy answered", func() bool { return f.metric(t, "nave_xds_inflight_bytes") == 0 })
}
