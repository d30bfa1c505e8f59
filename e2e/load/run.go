package load

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/navemesh/nave/shared/xdsbootstrap"
)

// Options configure one run: the workload, the proxies and the scenarios.
type Options struct {
	// Services and EndpointsPerCluster size the workload (S1: 1,000 × 5 in
	// each of three clusters).
	Services, EndpointsPerCluster int
	Clusters                      []string // default c1, c2, c3
	// Namespaces (default 10), EditService and Scoped shape the workload
	// further (WorkloadOptions): issue 26's S5 is 5,000 services in 50
	// namespaces, scoped by Sidecars, the edit in a namespace no other
	// imports.
	Namespaces, EditService int
	Scoped                  bool
	// Proxies is the number of ADS streams; Gateways and Proxyless of them
	// are gateways and proxyless clients (negative: 2% and 5% of Proxies),
	// the rest sidecars.
	Proxies, Gateways, Proxyless int
	// Delta selects incremental ADS; otherwise state of the world.
	Delta bool
	// Scenarios to report, of S1 S2 S3 S4 (default all). The proxies
	// always connect first (S1's storm), reported or not.
	Scenarios []string
	// FanOutEdits is how many edits S2 makes, one after the other (default 1).
	FanOutEdits int
	// ChurnRate (moves per second, default 30) and ChurnDuration (default
	// 60 s) shape S3.
	ChurnRate     float64
	ChurnDuration time.Duration
	// FlapOutage is how long S4 keeps a spoke away (default 10 s);
	// FlapQuiet how long it watches after the resync (default 5 s).
	FlapOutage, FlapQuiet time.Duration
	// FlapClusters is how many clusters S4 stops at once, the last ones
	// (default 1; issue 26's S6 stops 10 of 100).
	FlapClusters int
	// Settle is the silence (no response to any proxy) awaited between
	// scenarios (default 1 s).
	Settle time.Duration
	// Timeout bounds every wait (default 10 minutes): a hang fails the run.
	Timeout time.Duration
	// Logger reports progress (default: discard).
	Logger *slog.Logger
	// TracePath, if set, receives every response every proxy received
	// (CSV: proxy, kind, ms since the run's start, type, resources,
	// removed, bytes, endpoint moves first seen).
	TracePath string
	// ProfileDir, if set, receives a hub CPU profile of each scenario
	// reported (ProfileSeconds long from the scenario's start, default 30;
	// the next scenario waits for it) and a heap profile taken as it
	// starts; with replicas, one of each per replica, and of the idle set
	// (Idle) too.
	ProfileDir     string
	ProfileSeconds int
	// Label names the run in profile file names.
	Label string
	// Idle is, when the hub runs as replicas, how long the set is watched
	// holding the workload with no proxy connected, for its steady-state
	// gossip and relay rates (default 30 s, memberlist's push/pull
	// interval).
	Idle time.Duration
	// WatchIdle watches a single hub idle for Idle too, for comparison
	// with a replica set's idle cost.
	WatchIdle bool
	// SpreadByNamespace connects, with replicas, every proxy of a
	// namespace to one replica (the namespace's index mod the replicas;
	// gateways all to one) instead of round robin, so that each proxy
	// key lives on one replica only (what key-affine placement would
	// save); each proxy's node names that replica its home, as an
	// agent's with xds.replicas does, so the replicas shed none of them
	// (replica.Balancer) whatever replicas.shedRate.
	SpreadByNamespace bool
}

func (o *Options) defaults() {
	if len(o.Clusters) == 0 {
		o.Clusters = []string{"c1", "c2", "c3"}
	}
	if o.Gateways < 0 {
		o.Gateways = o.Proxies / 50
	}
	if o.Proxyless < 0 {
		o.Proxyless = o.Proxies / 20
	}
	if len(o.Scenarios) == 0 {
		o.Scenarios = []string{"S1", "S2", "S3", "S4"}
	}
	if o.FanOutEdits <= 0 {
		o.FanOutEdits = 1
	}
	if o.ChurnRate <= 0 {
		o.ChurnRate = 30
	}
	if o.ChurnDuration <= 0 {
		o.ChurnDuration = 60 * time.Second
	}
	if o.FlapOutage <= 0 {
		o.FlapOutage = 10 * time.Second
	}
	if o.FlapClusters <= 0 {
		o.FlapClusters = 1
	}
	if o.FlapQuiet <= 0 {
		o.FlapQuiet = 5 * time.Second
	}
	if o.Settle <= 0 {
		o.Settle = time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ProfileSeconds <= 0 {
		o.ProfileSeconds = 30
	}
	if o.Idle <= 0 {
		o.Idle = 30 * time.Second
	}
}

// Mode is "delta" or "sotw".
func (o *Options) Mode() string {
	if o.Delta {
		return "delta"
	}
	return "sotw"
}

type runner struct {
	o   Options
	w   *Workload
	hub *Hub // hubs[0]
	// hubs are the hub's processes: one, or the replicas of one set.
	hubs   []*Hub
	steady map[string]float64 // replicas only: the set's steady state before S1 (Extra of S1)
	// loaded is how long the hub took from the spokes' start to holding
	// the whole workload (every cluster synced, the mesh built): Extra
	// load_seconds of S1.
	loaded  time.Duration
	dead    map[int]bool // hubs killed (F1)
	env     *env
	spokes  *spokes
	clients []*Client
	log     *slog.Logger
}

// Run starts a hub with start, feeds it the workload through one
// in-process spoke uplink per cluster, connects the proxies and runs the
// scenarios, returning one Result per scenario asked for. Everything it
// started is stopped before it returns.
//
// If start returns several hubs, they are the replicas of one set
// (StartReplicas): cluster c's spoke pushes to replica c mod n, proxy i
// connects to replica i mod n, and every replica must hold the whole
// workload before the proxies connect. The set is then watched idle for
// Options.Idle, and every Result carries each replica's CPU, peak RSS,
// relay and gossip rates (Extra "rK_…"; HubCPU is their sum, PeakRSS the
// largest).
func Run(ctx context.Context, o Options, start HubStarter) ([]Result, error) {
	o.defaults()
	for _, s := range o.Scenarios {
		if Titles[s] == "" {
			return nil, fmt.Errorf("unknown scenario %q (want S1, S2, S3, S4 or, with replicas, F1)", s)
		}
	}
	w, err := NewWorkload(WorkloadOptions{Services: o.Services, EndpointsPerCluster: o.EndpointsPerCluster, Clusters: o.Clusters,
		Namespaces: o.Namespaces, EditService: o.EditService, Scoped: o.Scoped})
	if err != nil {
		return nil, err
	}
	specs, err := Proxies(w, o.Proxies, o.Gateways, o.Proxyless)
	if err != nil {
		return nil, err
	}
	hubs, stop, err := start(ctx)
	if err != nil {
		return nil, fmt.Errorf("starting the hub: %w", err)
	}
	defer stop()
	if len(hubs) == 0 {
		return nil, fmt.Errorf("starting the hub: no hub started")
	}
	if len(hubs) == 1 && slices.Contains(o.Scenarios, "F1") {
		return nil, fmt.Errorf("scenario F1 (replica failover) needs replicas")
	}
	r := &runner{o: o, w: w, hub: hubs[0], hubs: hubs, env: newEnv(), log: o.Logger}
	var spokeAddrs []string
	for i, h := range hubs {
		r.log.Info("hub started", "replica", i, "pid", h.PID, "xds", h.XDS, "admin", h.Admin)
		spokeAddrs = append(spokeAddrs, h.Spokes)
	}

	if len(hubs) > 1 {
		// Each spoke dials its replica through a forwarder that falls
		// back to the others, as through a Service (F1 re-homes it).
		for i := range hubs {
			backends := append(append([]string(nil), spokeAddrs[i:]...), spokeAddrs[:i]...)
			f, err := NewForwarder(backends...)
			if err != nil {
				return nil, err
			}
			defer f.Close()
			spokeAddrs[i] = f.Addr()
		}
	}
	loadStart := time.Now()
	r.spokes = startSpokes(ctx, spokeAddrs, w, o.Logger)
	defer r.spokes.stopAll()
	if err := r.spokes.waitSynced(ctx, o.Timeout); err != nil {
		return nil, fmt.Errorf("spokes: %w", err)
	}
	if err := r.waitLoaded(ctx); err != nil {
		return nil, err
	}
	r.loaded = time.Since(loadStart)
	r.log.Info("hub holds the workload", "services", w.Services, "clusters", len(w.Clusters), "replicas", len(hubs), "took", r.loaded.Round(time.Millisecond))
	if len(hubs) > 1 || o.WatchIdle {
		if r.steady, err = r.steadyState(ctx, time.Since(loadStart)); err != nil {
			return nil, err
		}
	}

	r.env.watched[r.env.names.idString(w.ClusterName(w.edited))] = true
	for _, s := range specs {
		i := r.replicaOf(s)
		if o.SpreadByNamespace && len(hubs) > 1 {
			s = s.homedOn(ReplicaID(i))
		}
		c, err := newClient(r.env, s, o.Delta, hubs[i].XDS)
		if err != nil {
			return nil, err
		}
		c.replica = i
		r.clients = append(r.clients, c)
	}
	defer func() {
		for _, c := range r.clients {
			c.close()
		}
	}()
	if o.TracePath != "" {
		defer func() {
			if err := r.writeTrace(o.TracePath); err != nil {
				r.log.Error("writing the trace", "err", err)
			}
		}()
	}

	var results []Result
	want := func(s string) bool { return slices.Contains(o.Scenarios, s) }
	steps := []struct {
		name string
		fn   func(context.Context) (Result, error)
	}{{"S1", r.coldConnect}, {"S2", r.fanOut}, {"S3", r.churn}, {"S4", r.flap}, {"F1", r.failover}}
	for _, st := range steps {
		if st.name != "S1" && !want(st.name) {
			continue
		}
		r.log.Info("scenario", "name", st.name, "title", Titles[st.name], "mode", o.Mode(), "proxies", len(r.clients))
		res, err := st.fn(ctx)
		if err != nil {
			return results, fmt.Errorf("%s %s: %w", st.name, Titles[st.name], err)
		}
		r.log.Info("scenario done", "name", st.name, "p99", secs(res.Latency.P99), "hubCPU", res.HubCPU, "notes", res.Notes())
		if want(st.name) {
			results = append(results, res)
		}
		if err := r.waitQuiet(ctx, o.Settle); err != nil {
			return results, err
		}
	}
	return results, nil
}

// replicaOf is the replica proxy s connects to: round robin, or by
// namespace (Options.SpreadByNamespace).
func (r *runner) replicaOf(s ProxySpec) int {
	if !r.o.SpreadByNamespace {
		return s.Index % len(r.hubs)
	}
	return r.homeOrder(s)[0]
}

// homedOn is s with its node naming home its home replica, as an
// agent's bootstrap with xds.replicas does (xdsbootstrap.MetaHomeReplica):
// the replicas then shed it only toward home, never while it is there.
func (s ProxySpec) homedOn(home string) ProxySpec {
	s.Node = proto.CloneOf(s.Node)
	if s.Node.Metadata == nil {
		s.Node.Metadata = &structpb.Struct{}
	}
	if s.Node.Metadata.Fields == nil {
		s.Node.Metadata.Fields = map[string]*structpb.Value{}
	}
	s.Node.Metadata.Fields[xdsbootstrap.MetaHomeReplica] = structpb.NewStringValue(home)
	return s
}

// homeOrder is the order of the replicas an agent's bootstrap with
// xds.replicas gives proxy s (xdsbootstrap.HomeOrder of its mesh and
// namespace over the replicas' ids): its namespace's home first, then
// the replicas it fails over to.
func (r *runner) homeOrder(s ProxySpec) []int {
	replicas := make([]xdsbootstrap.Replica, len(r.hubs))
	index := map[string]int{}
	for i, h := range r.hubs {
		replicas[i] = xdsbootstrap.Replica{Name: ReplicaID(i), Address: h.XDS}
		index[ReplicaID(i)] = i
	}
	md := s.Node.GetMetadata().GetFields()
	var out []int
	for _, h := range xdsbootstrap.HomeOrder(md["MESH"].GetStringValue(), md["NAMESPACE"].GetStringValue(), replicas) {
		out = append(out, index[h.Name])
	}
	return out
}

// waitLoaded waits until the hub's push context holds every service of
// every cluster, and has stopped rebuilding.
func (r *runner) waitLoaded(ctx context.Context) error {
	err := poll(ctx, r.o.Timeout, 50*time.Millisecond, func() error {
		for i, h := range r.hubs {
			var meshes meshView
			if err := h.getJSON("/debug/meshes", &meshes); err != nil {
				return err
			}
			if err := r.holdsWorkload(meshes); err != nil {
				if len(r.hubs) > 1 {
					err = fmt.Errorf("replica %s: %w", ReplicaID(i), err)
				}
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the hub to hold the workload: %w", err)
	}
	// Rebuilds stop once the debounce has passed.
	last, stable := -1.0, time.Time{}
	return poll(ctx, r.o.Timeout, 100*time.Millisecond, func() error {
		b := 0.0
		for _, h := range r.hubs {
			m, err := h.Metrics()
			if err != nil {
				return err
			}
			b += sumMetric(m, "nave_pushctx_builds_total")
		}
		if b != last {
			last, stable = b, time.Now()
		}
		if time.Since(stable) < 1500*time.Millisecond {
			return fmt.Errorf("the hub is still building (%v builds)", b)
		}
		return nil
	})
}

// meshView is the part of /debug/meshes waitLoaded reads.
type meshView []struct {
	Mesh     string `json:"mesh"`
	Services int    `json:"services"`
	Clusters []struct {
		Name    string `json:"name"`
		Objects int    `json:"objects"`
		Synced  bool   `json:"synced"`
	} `json:"clusters"`
}

// holdsWorkload says why a hub's meshes are not the whole workload.
func (r *runner) holdsWorkload(meshes meshView) error {
	for _, m := range meshes {
		if m.Mesh != "default" {
			continue
		}
		if m.Services != r.w.Services {
			return fmt.Errorf("the hub's mesh has %d services, want %d", m.Services, r.w.Services)
		}
		if len(m.Clusters) != len(r.w.Clusters) {
			return fmt.Errorf("the hub's mesh has %d clusters, want %d", len(m.Clusters), len(r.w.Clusters))
		}
		for c, cl := range m.Clusters {
			if !cl.Synced || cl.Objects != r.w.Count(c) {
				return fmt.Errorf("cluster %s: synced %v, %d objects, want %d", cl.Name, cl.Synced, cl.Objects, r.w.Count(c))
			}
		}
		return nil
	}
	return fmt.Errorf("the hub has no push context for mesh default")
}

// steadyState measures a replica set that holds the workload (loaded
// took since the spokes started) before any proxy connects: the relay
// bytes each replica sent so far (the initial full state of the clusters
// it owns, to every peer), then each one's gossip and relay rates and CPU
// over Options.Idle. The numbers go into S1's Extra.
func (r *runner) steadyState(ctx context.Context, loaded time.Duration) (map[string]float64, error) {
	out := map[string]float64{"load_seconds": loaded.Seconds()}
	for i, h := range r.hubs {
		m, err := h.Metrics()
		if err != nil {
			return nil, fmt.Errorf("replica %s: %w", ReplicaID(i), err)
		}
		out[fmt.Sprintf("r%d_initial_relay_bytes", i)] = sumMetric(m, relayBytesMetric)
		out["initial_relay_bytes"] += sumMetric(m, relayBytesMetric)
		// What holding the workload took: snapshot builds, and the
		// process's CPU since it started.
		out[fmt.Sprintf("r%d_load_builds", i)] = sumMetric(m, "nave_pushctx_builds_total")
		if cpu, err := cpuSeconds(h.PID); err == nil {
			out[fmt.Sprintf("r%d_load_cpu_s", i)] = cpu
		}
	}
	r.log.Info("watching the idle replica set", "for", r.o.Idle, "initial relay bytes", out["initial_relay_bytes"])
	base := ""
	if r.o.ProfileDir != "" {
		base = r.o.Label + "idle"
	}
	procs, profiled := r.beginProbes(base, "", max(1, int(r.o.Idle/time.Second)))
	start := time.Now()
	select {
	case <-ctx.Done():
	case <-time.After(r.o.Idle):
	}
	if profiled != nil {
		<-profiled
	}
	wall := time.Since(start).Seconds()
	for i, pp := range procs {
		u := pp.end()
		pre := fmt.Sprintf("r%d_idle_", i)
		out[pre+"cpu_s"] = u.cpu
		out[pre+"gossip_bytes_per_s"] = sumMetric(u.metrics, gossipBytesMetric) / wall
		out[pre+"relay_bytes_per_s"] = sumMetric(u.metrics, relayBytesMetric) / wall
		out["idle_gossip_bytes_per_s"] += out[pre+"gossip_bytes_per_s"] / float64(len(procs))
		out[fmt.Sprintf("r%d_idle_rss_mb", i)] = u.startMB
	}
	out["idle_seconds"] = wall
	return out, ctx.Err()
}

// eventCount is how many responses every proxy received so far.
func (r *runner) eventCount() int {
	n := 0
	for _, c := range r.clients {
		c.mu.Lock()
		n += len(c.events)
		c.mu.Unlock()
	}
	return n
}

// waitQuiet waits until no proxy received anything for d.
func (r *runner) waitQuiet(ctx context.Context, d time.Duration) error {
	last, since := -1, time.Now()
	err := poll(ctx, r.o.Timeout, 50*time.Millisecond, func() error {
		if n := r.eventCount(); n != last {
			last, since = n, time.Now()
		}
		if time.Since(since) < d {
			return fmt.Errorf("proxies still receiving (%d responses so far)", last)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("waiting for quiet: %w", err)
	}
	return nil
}

// probe measures the hub and the proxies over one scenario.
type probe struct {
	r        *runner
	name     string
	start    time.Time
	tool0    float64
	procs    []*procProbe  // one per hub process
	profiled chan struct{} // closed when the scenario's profile is saved
}

// procProbe measures one hub process.
type procProbe struct {
	index      int // of the hub in runner.hubs
	hub        *Hub
	cpu0       float64
	metrics0   map[string]float64
	peakReset  bool
	stop, done chan struct{}
	sampledKB  int64
	startKB    int64 // its RSS when the scenario started
}

func (h *Hub) beginProbe() *procProbe {
	p := &procProbe{hub: h, stop: make(chan struct{}), done: make(chan struct{})}
	p.metrics0, _ = h.Metrics()
	p.startKB, _ = MemKB(h.PID, "VmRSS")
	p.peakReset = resetPeak(h.PID) == nil
	p.cpu0, _ = cpuSeconds(h.PID)
	go func() {
		defer close(p.done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			if kb, err := MemKB(h.PID, "VmRSS"); err == nil && kb > p.sampledKB {
				p.sampledKB = kb
			}
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
		}
	}()
	return p
}

// procUsage is what one hub process used over a probe.
type procUsage struct {
	cpu, peakMB, startMB float64
	metrics              map[string]float64 // the change of each series
}

func (p *procProbe) end() procUsage {
	cpu1, _ := cpuSeconds(p.hub.PID)
	close(p.stop)
	<-p.done
	peak := p.sampledKB
	if p.peakReset {
		if hwm, err := MemKB(p.hub.PID, "VmHWM"); err == nil {
			peak = max(peak, hwm)
		}
	}
	u := procUsage{cpu: cpu1 - p.cpu0, peakMB: float64(peak) / 1024, startMB: float64(p.startKB) / 1024, metrics: map[string]float64{}}
	if m1, err := p.hub.Metrics(); err == nil {
		for k, v := range m1 {
			if d := v - p.metrics0[k]; d != 0 && !strings.HasSuffix(k, "_connections") {
				u.metrics[k] = d
			}
		}
	}
	return u
}

func (r *runner) begin(name string) *probe {
	p := &probe{r: r, name: name}
	base := ""
	if r.o.ProfileDir != "" && slices.Contains(r.o.Scenarios, name) {
		// The heap as the scenario starts: after S1, what the connected,
		// idle proxies cost (a GC runs first: live objects only).
		base = fmt.Sprintf("%s%s-%s-%d", r.o.Label, name, r.o.Mode(), r.o.Proxies)
	}
	p.procs, p.profiled = r.beginProbes(base, "-"+strings.ReplaceAll(Titles[name], " ", "-"), r.o.ProfileSeconds)
	p.tool0 = selfCPU()
	p.start = time.Now()
	return p
}

// beginProbes starts measuring every live hub process. With base set, it
// first saves each one's heap (after a GC, which the probe then does not
// count), a CPU profile of the next seconds and the heap again after
// them (for what they allocated: go tool pprof -sample_index=alloc_space
// -diff_base …-heap-at-start.pprof …-heap-at-end.pprof), into the profile
// directory under base plus suffix (with replicas, each file names its
// replica: base-rK…); the channel is closed when every CPU profile is
// saved (nil without base).
func (r *runner) beginProbes(base, suffix string, seconds int) ([]*procProbe, chan struct{}) {
	name := func(i int) string {
		if len(r.hubs) > 1 {
			return fmt.Sprintf("%s-r%d", base, i)
		}
		return base
	}
	if base != "" {
		for i, h := range r.hubs {
			if r.dead[i] {
				continue
			}
			if err := h.fetch(filepath.Join(r.o.ProfileDir, name(i)+"-heap-at-start.pprof"), "/debug/pprof/heap?gc=1"); err != nil {
				r.log.Error("hub heap profile", "profile", name(i), "err", err)
			}
		}
	}
	var procs []*procProbe
	for i, h := range r.hubs {
		if !r.dead[i] {
			pp := h.beginProbe()
			pp.index = i
			procs = append(procs, pp)
		}
	}
	if base == "" {
		return procs, nil
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, pp := range procs {
		wg.Go(func() {
			path := filepath.Join(r.o.ProfileDir, name(pp.index)+suffix+".pprof")
			if err := pp.hub.fetch(path, fmt.Sprintf("/debug/pprof/profile?seconds=%d", seconds)); err != nil {
				r.log.Error("hub CPU profile", "profile", name(pp.index), "err", err)
			}
			// The heap once the CPU profile ends (after a GC: a heap
			// profile counts what was allocated as of the last one):
			// its alloc_space less the one at the start is what was
			// allocated over those seconds, by where. A scenario that
			// outlasts the profile counts that collection in its CPU
			// and collections.
			path = filepath.Join(r.o.ProfileDir, name(pp.index)+suffix+"-heap-at-end.pprof")
			if err := pp.hub.fetch(path, "/debug/pprof/heap?gc=1"); err != nil {
				r.log.Error("hub heap profile", "profile", name(pp.index), "err", err)
			}
		})
	}
	go func() {
		wg.Wait()
		close(done)
	}()
	return procs, done
}

// fetch saves the hub's admin endpoint urlPath (a profile) to path.
func (h *Hub) fetch(path, urlPath string) error {
	resp, err := http.Get(h.URL(urlPath))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Replica metrics the benchmark reports per replica.
const (
	relayBytesMetric  = "nave_hub_replica_relay_sent_bytes_total"
	gossipBytesMetric = "nave_hub_replica_gossip_sent_bytes_total"
)

// end finishes the measurement: the hub's CPU and peak memory, its
// metrics' changes, and what the proxies received since begin. With
// replicas, HubCPU is the sum of theirs, PeakRSS the largest, Hub the
// sum of their metrics' changes, and Extra holds each replica's numbers.
func (p *probe) end() Result {
	end := time.Now()
	tool1 := selfCPU()
	wall := end.Sub(p.start).Seconds()
	res := Result{Scenario: p.name, Mode: p.r.o.Mode(), Proxies: len(p.r.clients), Services: p.r.w.Services, Runs: 1,
		ToolCPU: tool1 - p.tool0, Wall: wall,
		ByType: map[string]TypeCounts{}, Extra: map[string]float64{}, Hub: map[string]float64{}}
	for _, pp := range p.procs {
		u := pp.end()
		res.HubCPU += u.cpu
		res.PeakRSS = max(res.PeakRSS, u.peakMB)
		for k, v := range u.metrics {
			res.Hub[k] += v
		}
		pre := fmt.Sprintf("r%d_", pp.index)
		if len(p.r.hubs) == 1 {
			pre = "hub_"
		}
		// What the process allocated and how often it collected, which
		// shared cores do not blur as they do CPU-seconds; and whether it
		// had returned its idle heap to the OS before the scenario (then
		// the scenario faults its pages in again).
		res.Extra[pre+"alloc_mb"] = sumMetric(u.metrics, allocBytesMetric) / (1 << 20)
		res.Extra[pre+"gc_cycles"] = sumMetric(u.metrics, gcCyclesMetric)
		res.Extra[pre+"idle_releases_before"] = sumMetric(pp.metrics0, idleReleasesMetric)
		if len(p.r.hubs) == 1 {
			res.Extra["hub_rss_start_mb"] = u.startMB
			continue
		}
		res.Extra[pre+"cpu_s"] = u.cpu
		res.Extra[pre+"peak_rss_mb"] = u.peakMB
		res.Extra[pre+"rss_start_mb"] = u.startMB
		res.Extra[pre+"relay_bytes"] = sumMetric(u.metrics, relayBytesMetric)
		res.Extra[pre+"gossip_bytes"] = sumMetric(u.metrics, gossipBytesMetric)
		res.Extra[pre+"relay_bytes_per_s"] = res.Extra[pre+"relay_bytes"] / wall
		res.Extra[pre+"gossip_bytes_per_s"] = res.Extra[pre+"gossip_bytes"] / wall
	}
	if n := len(p.r.hubs); n > 1 {
		res.Extra["replicas"] = float64(n)
		for _, c := range p.r.clients {
			res.Extra[fmt.Sprintf("r%d_proxies", c.replica)]++
		}
	}
	from, to := p.r.env.since(p.start), p.r.env.since(end)
	for _, c := range p.r.clients {
		if c.Err() != nil {
			res.ClientErrors++
		}
		for _, ev := range c.Events() {
			if ev.At < from || ev.At > to {
				continue
			}
			tc := res.ByType[TypeNames[ev.Type]]
			tc.Responses++
			tc.Resources += float64(ev.Resources)
			tc.Removed += float64(ev.Removed)
			tc.Bytes += float64(ev.Bytes)
			res.ByType[TypeNames[ev.Type]] = tc
			res.Bytes += float64(ev.Bytes)
		}
	}
	if p.profiled != nil {
		<-p.profiled
	}
	return res
}

// window returns a client's events between two times.
func (r *runner) window(c *Client, from, to time.Time) []Event {
	a, b := r.env.since(from), r.env.since(to)
	var out []Event
	for _, ev := range c.Events() {
		if ev.At >= a && ev.At <= b {
			out = append(out, ev)
		}
	}
	return out
}

// firstError describes the failed proxy streams.
func (r *runner) firstError() error {
	n := 0
	var first error
	for _, c := range r.clients {
		if err := c.Err(); err != nil {
			if n == 0 {
				first = fmt.Errorf("proxy %s: %w", c.Spec.Node.GetId(), err)
			}
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return fmt.Errorf("%d proxy streams failed, first %w", n, first)
}

// writeTrace writes every response every proxy received, as CSV.
func (r *runner) writeTrace(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	fmt.Fprintln(w, "proxy,kind,ms,type,resources,removed,bytes,moves_seen")
	for _, c := range r.clients {
		for _, ev := range c.Events() {
			fmt.Fprintf(w, "%s,%s,%.3f,%s,%d,%d,%d,%d\n", c.Spec.Node.GetId(), c.Spec.Kind, float64(ev.At)/1e6, TypeNames[ev.Type], ev.Resources, ev.Removed, ev.Bytes, ev.Markers)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
