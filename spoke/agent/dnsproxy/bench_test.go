package dnsproxy

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// benchProxy is a proxy serving UDP on loopback with testTable, in front
// of the test upstream; it returns the proxy's address and the upstream's.
func benchProxy(tb testing.TB) (proxy, upstream string) {
	tb.Helper()
	up := startUpstream(tb)
	s := New(Options{Scope: testScope, Upstreams: []string{up.addr}})
	s.Update(testTable(), "v1")
	if err := s.Listen("127.0.0.1:0"); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	tb.Cleanup(func() {
		cancel()
		<-done
	})
	return s.Addrs()[0], up.addr
}

// exchangeOnce asks name over one UDP connection and checks the answer.
func exchangeOnce(tb testing.TB, c *dns.Conn, name string, want int) {
	m := query(name, dns.TypeA)
	if err := c.WriteMsg(m); err != nil {
		tb.Fatal(err)
	}
	resp, err := c.ReadMsg()
	if err != nil {
		tb.Fatal(err)
	}
	if len(resp.Answer) != want {
		tb.Fatalf("%s: %d answers, want %d", name, len(resp.Answer), want)
	}
}

// BenchmarkAnswerLatency is a pod's DNS query through the agent, as a
// client sees it, over UDP on loopback: a name of the table (hit), the
// search-path form of one (CNAME and address), and a name forwarded to an
// upstream resolver on loopback (which answers at once), and, for
// comparison, the same query sent to that resolver directly: the
// difference is what the agent adds. It reports the p50 and p99 of the
// round trips.
func BenchmarkAnswerLatency(b *testing.B) {
	proxy, upstream := benchProxy(b)
	for _, tc := range []struct {
		name, addr, query string
		answers           int
	}{
		{"hit", proxy, "reviews.ns1.svc.cluster.local.", 1},
		{"search-path", proxy, "reviews.ns1.svc.cluster.local.ns1.svc.cluster.local.", 2},
		{"forwarded", proxy, "up.test.", 1},
		{"upstream-direct", upstream, "up.test.", 1},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c, err := dns.Dial("udp", tc.addr)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			var lat []time.Duration
			b.ReportAllocs()
			for b.Loop() {
				start := time.Now()
				exchangeOnce(b, c, tc.query, tc.answers)
				lat = append(lat, time.Since(start))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// TestAnswerLatencyBenchmarkOnce is BenchmarkAnswerLatency's test twin.
func TestAnswerLatencyBenchmarkOnce(t *testing.T) {
	proxy, _ := benchProxy(t)
	c, err := dns.Dial("udp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	exchangeOnce(t, c, "reviews.ns1.svc.cluster.local.", 1)
	exchangeOnce(t, c, "reviews.ns1.svc.cluster.local.ns1.svc.cluster.local.", 2)
	exchangeOnce(t, c, "up.test.", 1)
}
