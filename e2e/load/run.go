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
	"time"
)

// Options configure one run: the workload, the proxies and the scenarios.
type Options struct {
	// Services and EndpointsPerCluster size the workload (S1: 1,000 × 5 in
	// each of three clusters).
	Services, EndpointsPerCluster int
	Clusters                      []string // default c1, c2, c3
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
	// the next scenario waits for it).
	ProfileDir     string
	ProfileSeconds int
	// Label names the run in profile file names.
	Label string
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
}

// Mode is "delta" or "sotw".
func (o *Options) Mode() string {
	if o.Delta {
		return "delta"
	}
	return "sotw"
}

type runner struct {
	o       Options
	w       *Workload
	hub     *Hub
	env     *env
	spokes  *spokes
	clients []*Client
	log     *slog.Logger
}

// Run starts a hub with start, feeds it the workload through one
// in-process spoke uplink per cluster, connects the proxies and runs the
// scenarios, returning one Result per scenario asked for. Everything it
// started is stopped before it returns.
func Run(ctx context.Context, o Options, start HubStarter) ([]Result, error) {
	o.defaults()
	for _, s := range o.Scenarios {
		if Titles[s] == "" {
			return nil, fmt.Errorf("unknown scenario %q (want S1, S2, S3 or S4)", s)
		}
	}
	w, err := NewWorkload(WorkloadOptions{Services: o.Services, EndpointsPerCluster: o.EndpointsPerCluster, Clusters: o.Clusters})
	if err != nil {
		return nil, err
	}
	specs, err := Proxies(w, o.Proxies, o.Gateways, o.Proxyless)
	if err != nil {
		return nil, err
	}
	hub, stop, err := start(ctx)
	if err != nil {
		return nil, fmt.Errorf("starting the hub: %w", err)
	}
	defer stop()
	r := &runner{o: o, w: w, hub: hub, env: newEnv(), log: o.Logger}
	r.log.Info("hub started", "pid", hub.PID, "xds", hub.XDS, "admin", hub.Admin)

	loadStart := time.Now()
	r.spokes = startSpokes(ctx, hub.Spokes, w, o.Logger)
	defer r.spokes.stopAll()
	if err := r.spokes.waitSynced(ctx, o.Timeout); err != nil {
		return nil, fmt.Errorf("spokes: %w", err)
	}
	if err := r.waitLoaded(ctx); err != nil {
		return nil, err
	}
	r.log.Info("hub holds the workload", "services", w.Services, "clusters", len(w.Clusters), "took", time.Since(loadStart).Round(time.Millisecond))

	r.env.watched[r.env.names.idString(w.ClusterName(0))] = true
	for _, s := range specs {
		c, err := newClient(r.env, s, o.Delta, hub.XDS)
		if err != nil {
			return nil, err
		}
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
	}{{"S1", r.coldConnect}, {"S2", r.fanOut}, {"S3", r.churn}, {"S4", r.flap}}
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

// waitLoaded waits until the hub's push context holds every service of
// every cluster, and has stopped rebuilding.
func (r *runner) waitLoaded(ctx context.Context) error {
	err := poll(ctx, r.o.Timeout, 50*time.Millisecond, func() error {
		var meshes []struct {
			Mesh     string `json:"mesh"`
			Services int    `json:"services"`
			Clusters []struct {
				Name    string `json:"name"`
				Objects int    `json:"objects"`
				Synced  bool   `json:"synced"`
			} `json:"clusters"`
		}
		if err := r.hub.getJSON("/debug/meshes", &meshes); err != nil {
			return err
		}
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
	})
	if err != nil {
		return fmt.Errorf("waiting for the hub to hold the workload: %w", err)
	}
	// Rebuilds stop once the debounce has passed.
	last, stable := -1.0, time.Time{}
	return poll(ctx, r.o.Timeout, 100*time.Millisecond, func() error {
		m, err := r.hub.Metrics()
		if err != nil {
			return err
		}
		b := sumMetric(m, "nave_pushctx_builds_total")
		if b != last {
			last, stable = b, time.Now()
		}
		if time.Since(stable) < 1500*time.Millisecond {
			return fmt.Errorf("the hub is still building (%v builds)", b)
		}
		return nil
	})
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
	r          *runner
	name       string
	start      time.Time
	cpu0       float64
	tool0      float64
	metrics0   map[string]float64
	peakReset  bool
	stop, done chan struct{}
	sampledKB  int64
	startKB    int64         // the hub's RSS when the scenario started
	profiled   chan struct{} // closed when the scenario's profile is saved
}

func (r *runner) begin(name string) *probe {
	p := &probe{r: r, name: name, stop: make(chan struct{}), done: make(chan struct{})}
	p.metrics0, _ = r.hub.Metrics()
	p.startKB, _ = MemKB(r.hub.PID, "VmRSS")
	p.peakReset = resetPeak(r.hub.PID) == nil
	p.cpu0, _ = cpuSeconds(r.hub.PID)
	p.tool0 = selfCPU()
	go func() {
		defer close(p.done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			if kb, err := MemKB(r.hub.PID, "VmRSS"); err == nil && kb > p.sampledKB {
				p.sampledKB = kb
			}
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
		}
	}()
	if r.o.ProfileDir != "" && slices.Contains(r.o.Scenarios, name) {
		p.profiled = make(chan struct{})
		go func() {
			defer close(p.profiled)
			path := filepath.Join(r.o.ProfileDir, fmt.Sprintf("%s%s-%s-%d-%s.pprof", r.o.Label, name, r.o.Mode(), r.o.Proxies, strings.ReplaceAll(Titles[name], " ", "-")))
			if err := r.profile(path, r.o.ProfileSeconds); err != nil {
				r.log.Error("hub CPU profile", "scenario", name, "err", err)
			}
		}()
	}
	p.start = time.Now()
	return p
}

func (r *runner) profile(path string, seconds int) error {
	resp, err := http.Get(r.hub.URL(fmt.Sprintf("/debug/pprof/profile?seconds=%d", seconds)))
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

// end finishes the measurement: the hub's CPU and peak memory, its
// metrics' changes, and what the proxies received since begin.
func (p *probe) end() Result {
	end := time.Now()
	cpu1, _ := cpuSeconds(p.r.hub.PID)
	tool1 := selfCPU()
	close(p.stop)
	<-p.done
	peak := p.sampledKB
	if p.peakReset {
		if hwm, err := MemKB(p.r.hub.PID, "VmHWM"); err == nil {
			peak = max(peak, hwm)
		}
	}
	res := Result{Scenario: p.name, Mode: p.r.o.Mode(), Proxies: len(p.r.clients), Runs: 1,
		HubCPU: cpu1 - p.cpu0, PeakRSS: float64(peak) / 1024, ToolCPU: tool1 - p.tool0, Wall: end.Sub(p.start).Seconds(),
		ByType: map[string]TypeCounts{}, Extra: map[string]float64{"hub_rss_start_mb": float64(p.startKB) / 1024}, Hub: map[string]float64{}}
	if m1, err := p.r.hub.Metrics(); err == nil {
		for k, v := range m1 {
			if d := v - p.metrics0[k]; d != 0 && !strings.HasSuffix(k, "_connections") {
				res.Hub[k] = d
			}
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
