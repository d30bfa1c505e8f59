package gen

import (
	"maps"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/navemesh/nave/internal/envoysim"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/gentest"
)

// dnsMesh is gentest.Mesh with a TCP and an HTTP ServiceEntry without
// addresses.
const dnsMesh = gentest.Mesh + `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ledger, namespace: shop}
spec:
  hosts: [ledger.example.com]
  ports: [{number: 7000, name: tcp, protocol: TCP}]
  location: MESH_EXTERNAL
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: quotes, namespace: shop}
spec:
  hosts: [quotes.example.com]
  ports: [{number: 8000, name: http, protocol: HTTP}]
  location: MESH_EXTERNAL
  resolution: DNS
`

// TestGoldenDNSCapture: what a sidecar whose agent captures DNS receives
// (testdata/golden/dns-capture-sidecar-shop-reviews.json, its name table
// included): a listener on the TCP host's auto-allocated address, that
// address among the HTTP host's route domains, and the addresses in its
// name table. The same sidecar without capture gets neither.
func TestGoldenDNSCapture(t *testing.T) {
	snap := gentest.Snapshot(t, map[string]string{"c1": dnsMesh})
	key := goldenProxies[0].key
	key.DNSCapture = true
	out := Envoy(snap, key)
	gentest.ValidateAll(t, out)
	nt := NameTable(snap, key)
	both := &Output{Resources: maps.Clone(out.Resources), Problems: append(out.Problems, nt.Problems...)}
	maps.Copy(both.Resources, nt.Resources)
	checkGolden(t, "dns-capture-sidecar-shop-reviews.json", goldenJSON(t, both))

	ledger, quotes := snap.Services["ledger.example.com"].AutoAddresses[0], snap.Services["quotes.example.com"].AutoAddresses[0]
	hasListener := func(o *Output) bool {
		l, _ := gentest.ByName(o, typeurl.Listener, ledger+"_7000").Message.(*listenerv3.Listener)
		return l != nil
	}
	hasDomain := func(o *Output) bool {
		rc, _ := gentest.ByName(o, typeurl.Route, "8000").Message.(*routev3.RouteConfiguration)
		for _, vh := range rc.GetVirtualHosts() {
			for _, d := range vh.GetDomains() {
				if d == quotes || d == quotes+":8000" {
					return true
				}
			}
		}
		return false
	}
	if !hasListener(out) || !hasDomain(out) {
		t.Errorf("capturing sidecar: listener on %s_7000 %v, route domain %s %v; want both", ledger, hasListener(out), quotes, hasDomain(out))
	}
	plain := Envoy(snap, goldenProxies[0].key)
	if hasListener(plain) || hasDomain(plain) {
		t.Error("a sidecar that does not capture DNS got auto-allocated addresses")
	}
	// A client that resolved the names through its agent reaches them.
	sim := envoysim.New(out.Resources)
	if r := sim.Do(envoysim.Request{IP: ledger, Port: 7000}); len(r.TCP) != 1 || r.TCP[0].Name != "outbound|7000||ledger.example.com" {
		t.Errorf("TCP to %s:7000: listener %s, tcp %v; want ledger.example.com's cluster", ledger, r.Listener, envoysim.ClusterNames(r.TCP))
	}
	for _, authority := range []string{"quotes.example.com:8000", quotes + ":8000"} {
		r := sim.Do(envoysim.Request{IP: quotes, Port: 8000, Authority: authority, Path: "/", Method: "GET"})
		if len(r.Clusters) != 1 || r.Clusters[0].Name != "outbound|8000||quotes.example.com" {
			t.Errorf("HTTP to %s at %s:8000: clusters %v; want quotes.example.com's", authority, quotes, envoysim.ClusterNames(r.Clusters))
		}
	}
	if !strings.HasPrefix(ledger, "240.240.") {
		t.Errorf("ledger.example.com's address %s is not in 240.240.0.0/16", ledger)
	}
}
