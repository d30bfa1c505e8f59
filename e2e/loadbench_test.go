package e2e

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/e2e/load"
)

// The load benchmark's scale (issue 6's by default); pass them after
// -args, e.g. go test -run '^$' -bench BenchmarkLoad ./e2e/ -args -load.proxies=100.
var (
	loadServices  = flag.Int("load.services", 1000, "load benchmark: services")
	loadEndpoints = flag.Int("load.endpoints", 5, "load benchmark: endpoints per service in each of the three clusters")
	loadProxies   = flag.Int("load.proxies", 500, "load benchmark: proxies (2% gateways, 5% proxyless, the rest sidecars)")
	loadDuration  = flag.Duration("load.duration", 60*time.Second, "load benchmark: S3's endpoint churn duration")
	loadModes     = flag.String("load.modes", "sotw,delta", "load benchmark: ADS variants, comma separated")
	loadReplicaN  = flag.Int("load.replicas", 1, "load benchmark: run the hub as this many replicas (1: a single hub)")
)

// loadHub starts a fresh nave-hub for each run of the load tool, through
// the harness (killed by PID when the test ends at the latest).
func loadHub(tb testing.TB) load.HubStarter {
	return func(ctx context.Context) ([]*load.Hub, func(), error) {
		admin, spokes, xds := addr(harness.FreePort(tb)), addr(harness.FreePort(tb)), addr(harness.FreePort(tb))
		p := harness.Start(tb, "hub", binary("nave-hub"), load.HubArgs(admin, spokes, xds, "--log.level", "info", "--state.dir", tb.TempDir())...)
		harness.WaitReady(tb, "http://"+admin+"/healthz/ready", 30*time.Second)
		return []*load.Hub{{PID: p.PID(), Admin: admin, Spokes: spokes, XDS: xds}}, func() { p.Stop(10 * time.Second) }, nil
	}
}

// loadReplicas starts a fresh set of n nave-hub replicas for each run of
// the load tool (load.NewReplicaSetup), through the harness, one after
// the other, and waits until they see each other.
func loadReplicas(tb testing.TB, n int, extra ...string) load.HubStarter {
	if n <= 1 {
		return loadHub(tb)
	}
	return func(ctx context.Context) ([]*load.Hub, func(), error) {
		s, err := load.NewReplicaSetup(n, tb.TempDir(), append([]string{"--log.level", "info"}, extra...)...)
		if err != nil {
			return nil, nil, err
		}
		var procs []*harness.Proc
		stop := func() {
			for _, p := range procs {
				p.Stop(10 * time.Second)
			}
		}
		for i, h := range s.Hubs {
			p := harness.Start(tb, load.ReplicaID(i), binary("nave-hub"), s.Args[i]...)
			procs = append(procs, p)
			h.PID = p.PID()
			harness.WaitReady(tb, h.URL("/healthz/ready"), 30*time.Second)
		}
		if err := load.WaitMembers(ctx, s.Hubs, time.Minute); err != nil {
			stop()
			return nil, nil, err
		}
		return s.Hubs, stop, nil
	}
}

// BenchmarkLoad runs issue 6's load scenarios (S1 cold connect, S2
// fan-out, S3 endpoint churn, S4 spoke flap) against a real hub process,
// once per b.Loop iteration, for each ADS variant, and reports each
// scenario's p99 latency (seconds), the hub's CPU-seconds and peak RSS,
// and S4's pushed resources. The table is logged.
func BenchmarkLoad(b *testing.B) {
	for _, mode := range strings.Split(*loadModes, ",") {
		b.Run(mode, func(b *testing.B) {
			o := load.Options{Services: *loadServices, EndpointsPerCluster: *loadEndpoints, Proxies: *loadProxies,
				Gateways: -1, Proxyless: -1, Delta: mode == "delta", ChurnDuration: *loadDuration}
			var res []load.Result
			for b.Loop() {
				var err error
				if res, err = load.Run(context.Background(), o, loadReplicas(b, *loadReplicaN)); err != nil {
					b.Fatal(err)
				}
			}
			for _, r := range res {
				if r.Latency.N > 0 {
					b.ReportMetric(r.Latency.P99, r.Scenario+"-p99-s")
				}
				b.ReportMetric(r.HubCPU, r.Scenario+"-hub-cpu-s")
				b.ReportMetric(r.PeakRSS, r.Scenario+"-hub-rss-MB")
				if r.Scenario == "S1" && r.Extra["replicas"] > 1 {
					b.ReportMetric(r.Extra["steady_initial_relay_bytes"], "relay-initial-B")
					b.ReportMetric(r.Extra["steady_idle_gossip_bytes_per_s"], "gossip-idle-B/s")
				}
				if r.Scenario == "S4" {
					b.ReportMetric(r.Extra["resources"]+r.Extra["removals"], "S4-pushed")
				}
			}
			var buf bytes.Buffer
			if err := load.WriteTable(&buf, res); err != nil {
				b.Fatal(err)
			}
			b.Logf("\n%s", buf.String())
		})
	}
}

// TestBenchmarkLoadOnce is BenchmarkLoad's twin: every scenario once, at a
// tiny scale (20 services × 3 endpoints, 10 proxies of the three kinds),
// in both ADS variants. Its deadlines only catch hangs; it checks that the
// tool saw what it must (every proxy converged, every edit and endpoint
// move arrived), never how fast.
func TestBenchmarkLoadOnce(t *testing.T) {
	for _, delta := range []bool{false, true} {
		o := load.Options{Services: 20, EndpointsPerCluster: 1, Proxies: 10, Gateways: 1, Proxyless: 2, Delta: delta,
			ChurnRate: 30, ChurnDuration: 2 * time.Second, FlapOutage: 2 * time.Second, FlapQuiet: time.Second,
			Settle: 300 * time.Millisecond, Timeout: 2 * time.Minute, Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))}
		t.Run(o.Mode(), func(t *testing.T) {
			res := runLoad(t, o, loadHub(t))
			if len(res) != 4 {
				t.Fatalf("%d results, want one per scenario", len(res))
			}
			cpu := 0.0
			for _, r := range res {
				if r.ClientErrors > 0 {
					t.Errorf("%s: %v proxy streams failed", r.Scenario, r.ClientErrors)
				}
				if r.PeakRSS <= 0 {
					t.Errorf("%s: the hub's peak RSS was not measured", r.Scenario)
				}
				cpu += r.HubCPU // in 10 ms ticks: a tiny scenario may take none
			}
			if cpu <= 0 {
				t.Error("the hub's CPU time was not measured")
			}
			s1, s2, s3 := res[0], res[1], res[2]
			if s1.Extra["complete"] != 10 || s1.Latency.N != 10 || s1.Extra["hub_acked"] != 10 {
				t.Errorf("S1: %v of 10 proxies fully ACKed (the hub says %v)", s1.Extra["complete"], s1.Extra["hub_acked"])
			}
			if s1.Bytes == 0 || s1.ByType["EDS"].Resources == 0 || s1.ByType["RDS"].Resources == 0 {
				t.Errorf("S1: the proxies received %v bytes, by type %+v", s1.Bytes, s1.ByType)
			}
			if s2.Extra["holders"] != 10 || s2.Extra["reached"] != 10 || s2.Latency.N != 10 {
				t.Errorf("S2: the edit reached %v of %v proxies holding the cluster, want all 10", s2.Extra["reached"], s2.Extra["holders"])
			}
			if s3.Extra["moves"] < 30 || s3.Extra["expected"] == 0 || s3.Extra["missed"] != 0 {
				t.Errorf("S3: %v moves, %v of %v expected observations, %v missed", s3.Extra["moves"], s3.Extra["observed"], s3.Extra["expected"], s3.Extra["missed"])
			}
		})
	}
}

// runLoad runs the load tool once and logs its table.
func runLoad(t *testing.T, o load.Options, start load.HubStarter) []load.Result {
	t.Helper()
	res, err := load.Run(context.Background(), o, start)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := load.WriteTable(&buf, res); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", buf.String())
	return res
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestBenchmarkLoadReplicasOnce is the twin of BenchmarkLoad's replica mode
// (-load.replicas=3, nave-load --replicas 3): every scenario once at a tiny
// scale against three hub replicas, the three spokes spread over them and
// the proxies round robin. No thresholds: it checks that every proxy
// converged on every replica, that the edit and the endpoint moves reached
// proxies of replicas that do not own the spoke (through the relay), that
// the spoke flap removed nothing, and that each replica's CPU, memory,
// relay and gossip bytes were measured; then F1 kills replica 2: its
// spoke re-homes, its proxies reconnect to the others and converge, and
// the other proxies see no removal.
func TestBenchmarkLoadReplicasOnce(t *testing.T) {
	o := load.Options{Services: 20, EndpointsPerCluster: 1, Proxies: 9, Gateways: 1, Proxyless: 2, Scenarios: []string{"S1", "S2", "S3", "S4", "F1"},
		ChurnRate: 30, ChurnDuration: 2 * time.Second, FlapOutage: 2 * time.Second, FlapQuiet: time.Second,
		Settle: 300 * time.Millisecond, Idle: 2 * time.Second, Timeout: 2 * time.Minute, Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))}
	res := runLoad(t, o, loadReplicas(t, 3))
	if len(res) != 5 {
		t.Fatalf("%d results, want one per scenario", len(res))
	}
	for _, r := range res {
		if r.ClientErrors > 0 {
			t.Errorf("%s: %v proxy streams failed", r.Scenario, r.ClientErrors)
		}
		if r.Extra["replicas"] != 3 {
			t.Errorf("%s: measured %v replicas, want 3", r.Scenario, r.Extra["replicas"])
		}
		if r.Scenario == "F1" {
			continue
		}
		for i := range 3 {
			if r.Extra[fmt.Sprintf("r%d_peak_rss_mb", i)] <= 0 {
				t.Errorf("%s: replica %d's peak RSS was not measured", r.Scenario, i)
			}
			if r.Extra[fmt.Sprintf("r%d_proxies", i)] != 3 {
				t.Errorf("%s: replica %d served %v proxies, want 3", r.Scenario, i, r.Extra[fmt.Sprintf("r%d_proxies", i)])
			}
		}
	}
	s1, s2, s3, s4, f1 := res[0], res[1], res[2], res[3], res[4]
	if s1.Extra["complete"] != 9 || s1.Latency.N != 9 || s1.Extra["hub_acked"] != 9 {
		t.Errorf("S1: %v of 9 proxies fully ACKed (the replicas say %v)", s1.Extra["complete"], s1.Extra["hub_acked"])
	}
	for i := range 3 {
		// Each replica owns one cluster's spoke and relayed its full state
		// to both peers before any proxy connected.
		if v := s1.Extra[fmt.Sprintf("steady_r%d_initial_relay_bytes", i)]; v <= 0 {
			t.Errorf("replica %d relayed %v bytes of its spoke's state", i, v)
		}
		if v := s1.Extra[fmt.Sprintf("steady_r%d_idle_gossip_bytes_per_s", i)]; v <= 0 {
			t.Errorf("replica %d gossiped %v bytes/s while idle", i, v)
		}
	}
	// Cluster c1's spoke is on replica 0: the edit reaches the proxies of
	// replicas 1 and 2 only through the relay, and is relayed.
	if s2.Extra["holders"] != 9 || s2.Extra["reached"] != 9 {
		t.Errorf("S2: the edit reached %v of %v proxies holding the cluster, want all 9", s2.Extra["reached"], s2.Extra["holders"])
	}
	if s2.Extra["r0_relay_bytes"] <= 0 {
		t.Errorf("S2: replica 0 relayed %v bytes of the edit", s2.Extra["r0_relay_bytes"])
	}
	if s3.Extra["moves"] < 30 || s3.Extra["expected"] == 0 || s3.Extra["missed"] != 0 {
		t.Errorf("S3: %v moves, %v of %v expected observations, %v missed", s3.Extra["moves"], s3.Extra["observed"], s3.Extra["expected"], s3.Extra["missed"])
	}
	if s4.Extra["removals"] != 0 || s4.Extra["hub_saw_disconnect"] != 1 {
		t.Errorf("S4: %v removals (want 0); the spoke's replica saw the outage: %v", s4.Extra["removals"], s4.Extra["hub_saw_disconnect"])
	}
	if f1.Extra["reconnected"] != 3 || f1.Latency.N != 3 || f1.Extra["r0_proxies"]+f1.Extra["r1_proxies"] != 9 {
		t.Errorf("F1: %v of %v proxies of the killed replica reconnected and converged; the survivors serve %v and %v", f1.Latency.N, f1.Extra["reconnected"], f1.Extra["r0_proxies"], f1.Extra["r1_proxies"])
	}
	if f1.Extra["detect_seconds"] <= 0 || f1.Extra["rehome_seconds"] <= 0 {
		t.Errorf("F1: failure detection %vs, spoke re-home %vs not measured", f1.Extra["detect_seconds"], f1.Extra["rehome_seconds"])
	}
	if f1.Extra["others_removals"] != 0 {
		t.Errorf("F1: the proxies of the surviving replicas received %v removals", f1.Extra["others_removals"])
	}
}

// TestBenchmarkLoadReplicasHomedOnce is the twin of nave-load --replicas 3
// --spread-by-namespace: each proxy connects to its namespace's home
// replica (xdsbootstrap.HomeOrder, the order an agent's bootstrap with
// xds.replicas lists them in; decision 051), so each proxy key is generated
// on one replica only; when a replica is killed (F1), its proxies
// reconnect to the next replica of their order and converge, and the
// others' proxies receive no removal.
func TestBenchmarkLoadReplicasHomedOnce(t *testing.T) {
	o := load.Options{Services: 20, EndpointsPerCluster: 1, Proxies: 12, Gateways: 1, Proxyless: 2, Scenarios: []string{"S1", "F1"},
		Settle: 300 * time.Millisecond, Idle: time.Second, Timeout: 2 * time.Minute, SpreadByNamespace: true,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))}
	// Shedding on (the default rate): the spread is uneven on purpose,
	// but each proxy names its home, where it is never shed; nor is one
	// whose home is dead (F1). The tool does not reconnect a shed proxy,
	// so one shed would show in F1's count.
	res := runLoad(t, o, loadReplicas(t, 3))
	if len(res) != 2 {
		t.Fatalf("%d results, want one per scenario", len(res))
	}
	s1, f1 := res[0], res[1]
	for _, r := range res {
		if r.ClientErrors > 0 {
			t.Errorf("%s: %v proxy streams failed", r.Scenario, r.ClientErrors)
		}
	}
	if s1.Extra["complete"] != 12 || s1.Latency.N != 12 || s1.Extra["hub_acked"] != 12 {
		t.Errorf("S1: %v of 12 proxies fully ACKed (the replicas say %v)", s1.Extra["complete"], s1.Extra["hub_acked"])
	}
	// 9 sidecars in ns-0…ns-8 and a gateway: 10 keys, each generated by
	// its home replica alone (round robin would generate most on every
	// replica).
	if g := s1.Hub[`nave_proxy_generations_total{mode="full"}`]; g != 10 {
		t.Errorf("S1: %v full generations over the set, want 10 (one per key)", g)
	}
	if f1.Extra["reconnected"] == 0 || f1.Latency.N != int(f1.Extra["reconnected"]) {
		t.Errorf("F1: %v of %v proxies of the killed replica reconnected and converged", f1.Latency.N, f1.Extra["reconnected"])
	}
	if f1.Extra["r0_proxies"]+f1.Extra["r1_proxies"] != 12 {
		t.Errorf("F1: the survivors serve %v and %v proxies, want all 12", f1.Extra["r0_proxies"], f1.Extra["r1_proxies"])
	}
	if f1.Extra["others_removals"] != 0 {
		t.Errorf("F1: the proxies of the surviving replicas received %v removals", f1.Extra["others_removals"])
	}
}
