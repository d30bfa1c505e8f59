package replica_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/internal/metrictest"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/protocol"
	"github.com/navemesh/nave/shared/meshconfig"
)

// services returns n ServiceEntries of eps endpoints each (the load
// benchmark's shape: 1,000 services × 15 endpoints).
func services(tb testing.TB, n, eps int, gen int) []*meshconfig.Object {
	tb.Helper()
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: svc-%d, namespace: load}\nspec:\n  hosts: [svc-%d.load.svc.cluster.local]\n  ports: [{number: 8080, name: http, protocol: HTTP}]\n  resolution: STATIC\n  endpoints:\n", i, i)
		for e := range eps {
			fmt.Fprintf(&b, "  - {address: 10.%d.%d.%d, ports: {http: %d}}\n", i/250, i%250, e+1, 8080+gen)
		}
	}
	objs, errs := meshconfig.DecodeYAML([]byte(b.String()), "bench")
	if len(errs) > 0 {
		tb.Fatal(errs[0])
	}
	return objs
}

// relayPair is an owner with one peer, and a spoke's stream to the owner.
type relayPair struct {
	a, b *node
}

func newRelayPair(tb testing.TB) relayPair {
	a, b := newNode(tb, "a"), newNode(tb, "b")
	a.relayer.AddPeer("b", b.relay)
	return relayPair{a, b}
}

// waitHeld waits until b holds id synced with n objects of version gen.
func (p relayPair) waitHeld(tb testing.TB, id ingest.ClusterIdentity, n int, version string) {
	tb.Helper()
	testwait.For(tb, waitFor, func() error {
		h, ok := p.b.holding(id)
		if !ok || !h.Synced {
			return fmt.Errorf("b does not hold %s synced", id)
		}
		got := 0
		for _, byName := range h.Objects {
			for _, o := range byName {
				if version == "" || o.Version == version {
					got++
				}
			}
		}
		if got != n {
			return fmt.Errorf("b holds %d of %d objects of %s", got, n, id)
		}
		return nil
	})
}

// BenchmarkRelayFullState relays one cluster's full state (1,000
// services × 15 endpoints) from its owner to a peer: the cost of a peer
// joining or of a re-home, per cluster.
func BenchmarkRelayFullState(b *testing.B) {
	benchFullState(b, 1000, 15)
}

func benchFullState(b *testing.B, n, eps int) {
	p := newRelayPair(b)
	objs := services(b, n, eps, 0)
	b.ResetTimer()
	before := metrictest.Value(b, p.a.reg, "nave_hub_replica_relay_sent_bytes_total")
	for i := range b.N {
		id := ingest.ClusterIdentity{Mesh: "default", Cluster: fmt.Sprintf("c%d", i)}
		s := dialSpoke(b, p.a, id)
		s.state(objs)
		p.waitHeld(b, id, n, "")
	}
	sent := metrictest.Value(b, p.a.reg, "nave_hub_replica_relay_sent_bytes_total") - before
	b.ReportMetric(sent/float64(b.N)/1024, "relay-kb/cluster")
	b.ReportMetric(float64(n), "resources/cluster")
}

// BenchmarkRelayChange relays one changed service of a 1,000-service
// cluster: what a peer receives for one endpoint change, and how long it
// takes to hold it.
func BenchmarkRelayChange(b *testing.B) {
	benchChange(b, 1000, 15)
}

func benchChange(b *testing.B, n, eps int) {
	p := newRelayPair(b)
	id := ingest.ClusterIdentity{Mesh: "default", Cluster: "c"}
	s := dialSpoke(b, p.a, id)
	s.state(services(b, n, eps, 0))
	p.waitHeld(b, id, n, "")
	changed := [2]*meshconfig.Object{services(b, 1, eps, 1)[0], services(b, 1, eps, 2)[0]}
	b.ResetTimer()
	before := metrictest.Value(b, p.a.reg, "nave_hub_replica_relay_sent_bytes_total")
	start := time.Now()
	for i := range b.N {
		o := changed[i%2]
		r, err := protocol.Encode(o)
		if err != nil {
			b.Fatal(err)
		}
		s.send(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: o.Kind.TypeURL, Resources: []*discoveryv3.Resource{r}})
		testwait.For(b, waitFor, func() error {
			h, _ := p.b.holding(id)
			if got := h.Objects[o.Kind.TypeURL][o.Key()]; got == nil || got.Version != o.Version {
				return fmt.Errorf("b does not hold the change yet")
			}
			return nil
		})
	}
	elapsed := time.Since(start)
	sent := metrictest.Value(b, p.a.reg, "nave_hub_replica_relay_sent_bytes_total") - before
	b.ReportMetric(sent/float64(b.N), "relay-bytes/change")
	b.ReportMetric(float64(elapsed.Microseconds())/float64(b.N), "us/change-to-peer")
}

// TestRelayBenchmarksRunOnce is the benchmarks' test twin: it runs each
// once, small, so that a benchmark can never rot.
func TestRelayBenchmarksRunOnce(t *testing.T) {
	for name, f := range map[string]func(*testing.B){
		"full-state": func(b *testing.B) { benchFullState(b, 20, 3) },
		"change":     func(b *testing.B) { benchChange(b, 20, 3) },
	} {
		r := testing.Benchmark(f)
		if r.N == 0 {
			t.Fatalf("%s did not run", name)
		}
	}
}
