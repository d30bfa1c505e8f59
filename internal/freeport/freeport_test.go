package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestPortsAreFreeDistinctAndBelowTheEphemeralRange: each port handed out
// can be listened on, none twice, all in [low, high).
func TestPortsAreFreeDistinctAndBelowTheEphemeralRange(t *testing.T) {
	seen := map[int]bool{}
	for range 50 {
		addr, err := Addr()
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		if p < low || p >= high || seen[p] {
			t.Fatalf("handed out %d (seen before: %v), want a new port in [%d, %d)", p, seen[p], low, high)
		}
		seen[p] = true
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("%s is not free: %v", addr, err)
		}
		l.Close()
	}
}
