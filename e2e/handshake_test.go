package e2e

import (
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/internal/testwait"
)

// TestFailedHandshakesAreCountedAndRateLimited drops connections before
// their TLS handshake on every listener of a TLS hub (operator admin,
// spokes, xds, replica relay), and offers the relay a client without a
// certificate: each is counted per listener, and the log holds structured
// lines only, fewer than the failures.
func TestFailedHandshakesAreCountedAndRateLimited(t *testing.T) {
	op := harness.FreePort(t)
	rs := newReplicaSet(t, 1, "--admin.operator-listen", addr(op))
	h := rs.hubs[0]
	const drops = 200
	listeners := map[string]int{"admin.operatorListen": op, "spokes.listen": h.spokes, "xds.listen": h.xds, "replicas.relayListen": rs.relay[0]}
	failures := func(listener string) float64 {
		return scrape(t, h.url("/metrics"), `nave_tls_handshake_failures_total{listener="`+listener+`"}`)
	}
	for name, port := range listeners {
		for range drops {
			c, err := net.Dial("tcp", addr(port))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			c.Close()
		}
	}
	// A relay client without a certificate: refused, and now counted.
	c, err := tls.Dial("tcp", addr(rs.relay[0]), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the handshake is meant to fail on the server's side
	if err == nil {
		_, err = c.Read(make([]byte, 1)) // TLS 1.3: the server's refusal comes after the client's Finished
		c.Close()
	}
	if err == nil {
		t.Fatal("the relay served a client without a certificate")
	}
	for name := range listeners {
		want := float64(drops)
		if name == "replicas.relayListen" {
			want++
		}
		testwait.For(t, 30*time.Second, func() error {
			if got := failures(name); got != want {
				return fmt.Errorf("nave_tls_handshake_failures_total{listener=%q} = %v, want %v", name, got, want)
			}
			return nil
		})
	}
	log := h.proc.Log()
	if strings.Contains(log, "http: TLS handshake error") {
		t.Errorf("the hub logged net/http's unstructured handshake lines")
	}
	lines := strings.Count(log, `msg="tls handshake failed"`)
	t.Logf("%d failed handshakes, %d log lines", 4*drops+1, lines)
	if lines == 0 || lines >= 4*drops {
		t.Errorf("%d log lines for %d failed handshakes: want some, rate-limited", lines, 4*drops+1)
	}
	assertMetricsDocumented(t, h.url("/metrics"))
}
