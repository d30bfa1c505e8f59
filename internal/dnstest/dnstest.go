// Package dnstest runs DNS servers in tests: a miekg/dns handler served
// on UDP and TCP of one address, as a resolver is. Test-only
// (internal/layercheck).
package dnstest

import (
	"net"
	"testing"

	"github.com/miekg/dns"

	"github.com/navemesh/nave/spoke/agent/dnsproxy"
)

// Listen binds UDP on addr and TCP on the same port (dnsproxy.ListenPair).
func Listen(addr string) (net.PacketConn, net.Listener, error) { return dnsproxy.ListenPair(addr) }

// Start serves h on pc and l until stop is called.
func Start(pc net.PacketConn, l net.Listener, h dns.Handler) (stop func()) {
	servers := []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: l, Handler: h}}
	for _, s := range servers {
		go func() { _ = s.ActivateAndServe() }()
	}
	return func() {
		for _, s := range servers {
			_ = s.Shutdown() // one that never started says so: nothing to stop
		}
	}
}

// Serve listens on addr and serves h there until the test ends; it
// returns the address (a port 0 resolved).
func Serve(tb testing.TB, addr string, h dns.Handler) string {
	tb.Helper()
	pc, l, err := Listen(addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(Start(pc, l, h))
	return pc.LocalAddr().String()
}
