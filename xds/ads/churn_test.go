package ads_test

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/navemesh/nave/shared/typeurl"
	proxymodel "github.com/navemesh/nave/xds/proxy"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
)

// churnMesh is three ServiceEntries selecting WorkloadEntries by app
// label; addrs gives each WorkloadEntry's address (app = index mod 3).
func churnMesh(addrs []string) string {
	var b strings.Builder
	for s := range 3 {
		fmt.Fprintf(&b, `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: svc-%[1]d, namespace: shop}
spec:
  hosts: [svc-%[1]d.shop.svc.cluster.local]
  ports: [{number: 8080, name: http, protocol: HTTP}]
  resolution: STATIC
  workloadSelector: {labels: {app: svc-%[1]d}}
`, s)
	}
	for i, a := range addrs {
		if a == "" {
			continue // removed
		}
		fmt.Fprintf(&b, `---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: we-%d, namespace: shop}
spec: {address: %s, labels: {app: svc-%d}}
`, i, a, i%3)
	}
	return b.String()
}

// TestEndpointChurnKeepsClientsExact drives endpoint-only changes (moved,
// removed and added WorkloadEntries) past a state-of-the-world and a delta
// Envoy client subscribed to every cluster's endpoints. Such pushes send
// only what changed since the result the proxy holds; after every change
// both clients must hold exactly what the push context generates for them.
func TestEndpointChurnKeepsClientsExact(t *testing.T) {
	f := newFixture(t, nil)
	addrs := make([]string, 9)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("10.1.0.%d", i+1)
	}
	st := f.set(t, "m", synced("c1", pushctxtest.Decode(t, churnMesh(addrs))))
	n := envoyNode("sidecar~10.9.0.1~client-1.shop~shop.svc.cluster.local", map[string]string{"app": "client"})
	px, err := proxymodel.FromNode(n, "m")
	if err != nil {
		t.Fatal(err)
	}
	want := func() map[string][]byte {
		out := map[string][]byte{}
		for name, p := range st.ForProxy(px.Key()).Resources[typeurl.Endpoint] {
			out[name] = p.Any.GetValue()
		}
		return out
	}
	edsNames := slices.Sorted(maps.Keys(want()))
	if len(edsNames) != 3 {
		t.Fatalf("the sidecar has endpoints for %v, want the three services", edsNames)
	}

	s := f.connect(t, n)
	d := f.connectDelta(t, n)
	s.Subscribe(typeurl.Cluster)
	s.ACK(s.Next(typeurl.Cluster))
	d.subscribe(typeurl.Cluster)
	d.ack(d.next(typeurl.Cluster))
	s.Subscribe(typeurl.Endpoint, edsNames...)
	sotw := map[string][]byte{}
	apply := func() {
		r := s.Next(typeurl.Endpoint)
		for name, b := range sotwHeld(t, r) {
			sotw[name] = b
		}
		s.ACK(r, edsNames...)
	}
	apply()
	d.subscribe(typeurl.Endpoint, edsNames...)
	d.ack(d.next(typeurl.Endpoint))

	rng := rand.New(rand.NewPCG(7, 11))
	for step := range 30 {
		i := rng.IntN(len(addrs))
		switch {
		case addrs[i] == "":
			addrs[i] = fmt.Sprintf("10.2.%d.%d", step, i+1) // added again
		case rng.IntN(4) == 0:
			if slices.ContainsFunc(addrs, func(a string) bool { return a != "" && a != addrs[i] }) {
				addrs[i] = "" // removed
			}
		default:
			addrs[i] = fmt.Sprintf("10.3.%d.%d", step, i+1) // moved
		}
		st = f.set(t, "m", synced("c1", pushctxtest.Decode(t, churnMesh(addrs))))
		if st.State.Diff.Config {
			t.Fatalf("step %d: a WorkloadEntry change counted as a config change", step)
		}
		w := want()
		for !maps.EqualFunc(sotw, w, bytes.Equal) {
			apply()
		}
		for !maps.EqualFunc(d.held[typeurl.Endpoint], w, bytes.Equal) {
			d.ack(d.next(typeurl.Endpoint))
		}
	}
	s.Quiet(quietFor, "the SotW client holds everything")
	d.quiet(quietFor, "the delta client holds everything")
}
