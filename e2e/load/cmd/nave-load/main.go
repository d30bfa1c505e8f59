// Command nave-load runs issue 6's load benchmark against a real nave-hub
// process and prints the scenario table (docs/load-benchmark.md):
//
//	go run ./e2e/load/cmd/nave-load --proxies 100,500 --mode sotw,delta --runs 3
//
// Each run starts a fresh hub (built from this checkout unless --hub-bin
// names one) on free loopback ports, feeds it the workload through three
// in-process spoke uplinks, connects the proxies and runs the scenarios;
// the hub's process group is killed when the run ends, or when this
// command is interrupted.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/navemesh/nave/e2e/load"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "nave-load:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		hubBin     = flag.String("hub-bin", "", "nave-hub binary (default: go build ./hub/cmd/nave-hub from this checkout)")
		hubLog     = flag.String("hub-log", "", "append the hubs' output to this file (default: a file in a temporary directory, printed)")
		hubArgs    listFlag
		services   = flag.String("services", "1000", "services (ServiceEntries, each defined in every cluster); a comma-separated list runs each")
		endpoints  = flag.Int("endpoints", 5, "endpoints (WorkloadEntries) per service in each cluster")
		clusters   = flag.Int("clusters", 3, "clusters, each fed by its own spoke uplink")
		namespaces = flag.Int("namespaces", 10, "namespaces the services and sidecars are spread over")
		editSvc    = flag.Int("edit-service", 0, "S2: the service whose DestinationRule is edited")
		scoped     = flag.Bool("sidecar-scope", false, "a Sidecar per namespace whose egress is the namespace and the shared ns-0 and ns-1 (issue 26's S5)")
		proxies    = flag.String("proxies", "500", "proxies (ADS streams) per run; a comma-separated list runs each")
		gateways   = flag.Int("gateways", -1, "how many of the proxies are ingress gateways (default 2%)")
		proxyless  = flag.Int("proxyless", -1, "how many of the proxies are proxyless gRPC clients (default 5%)")
		modes      = flag.String("mode", "sotw", "ADS variant: sotw or delta; a comma-separated list runs each")
		scenarios  = flag.String("scenarios", "S1,S2,S3,S4", "scenarios to report (the proxies always connect first); with --replicas, F1 (replica failover, run last) may be added")
		edits      = flag.Int("edits", 1, "S2: edits, one after the other")
		settle     = flag.Duration("settle", time.Second, "the silence (no response to any proxy) awaited after each scenario, before the next starts: with a long one, the next scenario's \"hub RSS at start\" is the hub's memory with its proxies connected and idle that long")
		rate       = flag.Float64("rate", 30, "S3: endpoint moves per second, round robin over the clusters")
		duration   = flag.Duration("duration", 60*time.Second, "S3: how long the endpoint churn lasts")
		outage     = flag.Duration("outage", 10*time.Second, "S4: how long the spoke stays away")
		quiet      = flag.Duration("quiet", 5*time.Second, "S4: how long to watch after the spoke resynced")
		flapN      = flag.Int("flap-clusters", 1, "S4: how many clusters (the last ones) stop at once")
		runs       = flag.Int("runs", 1, "runs of each configuration (a fresh hub each); the table shows the median")
		timeout    = flag.Duration("timeout", 10*time.Minute, "longest wait for any step (a hang fails the run)")
		jsonPath   = flag.String("json", "", "also write every run's results and the medians as JSON to this file")
		traceDir   = flag.String("trace", "", "write every response every proxy received (CSV, one file per run) into this directory")
		profileDir = flag.String("profile", "", "save a hub CPU profile of each scenario, and heap profiles as it starts and as the CPU profile ends (their alloc_space difference: what the scenario allocated), into this directory (with replicas: each replica's, and of the idle set too)")
		profileSec = flag.Int("profile-seconds", 30, "length of each hub CPU profile, from the scenario's start")
		verbose    = flag.Bool("v", false, "log progress (and the spokes' warnings) to stderr")
		selfProf   = flag.String("cpuprofile", "", "write this tool's own CPU profile to this file (to keep the load generator cheap)")
		report     = flag.String("report", "", "print the table of a file written by --json, and run nothing")
		plotPath   = flag.String("plot", "", "also draw the hub's CPU-seconds and peak RSS in --plot-scenario against the proxies (or, with one proxy count, the services) of the runs, one line per mode, into this PNG file")
		plotScen   = flag.String("plot-scenario", "S1", "the scenario --plot draws")
		replicas   = flag.Int("replicas", 1, "run the hub as a set of this many replicas (docs/replicas.md): spokes spread over them by cluster, proxies round robin; 1: a single hub")
		spreadNS   = flag.Bool("spread-by-namespace", false, "with --replicas above 1: every proxy of a namespace connects to one replica (instead of round robin), so that each proxy key lives on one replica (proxy shedding off: the spread is uneven on purpose)")
		idle       = flag.Duration("idle", 30*time.Second, "with --replicas above 1: how long the set is watched idle, holding the workload, before the proxies connect (steady-state gossip); given explicitly, a single hub is watched too (its idle CPU, for comparison)")
	)
	flag.Var(&hubArgs, "hub-arg", "extra nave-hub flag, e.g. --hub-arg=--push.debounce-quiet=50ms (repeatable)")
	flag.Parse()
	idleSet := false
	flag.Visit(func(f *flag.Flag) { idleSet = idleSet || f.Name == "idle" })
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}

	if *report != "" {
		b, err := os.ReadFile(*report)
		if err != nil {
			return err
		}
		var saved struct {
			Args    []string      `json:"args"`
			Medians []load.Result `json:"medians"`
		}
		if err := json.Unmarshal(b, &saved); err != nil {
			return fmt.Errorf("%s: %w", *report, err)
		}
		fmt.Printf("nave-load %s\n\n", strings.Join(saved.Args, " "))
		return load.WriteTable(os.Stdout, saved.Medians)
	}
	if *selfProf != "" {
		f, err := os.Create(*selfProf)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	tmp, err := os.MkdirTemp("", "nave-load-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := *hubBin
	if bin == "" {
		bin = filepath.Join(tmp, "nave-hub")
		fmt.Fprintln(os.Stderr, "building nave-hub from this checkout ...")
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./hub/cmd/nave-hub")
		cmd.Dir = moduleRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build ./hub/cmd/nave-hub: %v\n%s", err, out)
		}
	}
	logPath := *hubLog
	if logPath == "" {
		f, err := os.CreateTemp("", "nave-load-hub-*.log")
		if err != nil {
			return err
		}
		f.Close()
		logPath = f.Name()
	}
	fmt.Fprintln(os.Stderr, "hub output:", logPath)
	for _, dir := range []string{*traceDir, *profileDir} {
		if dir != "" {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
		}
	}

	ns, err := positiveList("--proxies", *proxies)
	if err != nil {
		return err
	}
	svcs, err := positiveList("--services", *services)
	if err != nil {
		return err
	}
	var clusterNames []string
	for c := range *clusters {
		clusterNames = append(clusterNames, fmt.Sprintf("c%d", c+1))
	}
	var wantScenarios []string
	for _, s := range strings.Split(*scenarios, ",") {
		wantScenarios = append(wantScenarios, strings.ToUpper(strings.TrimSpace(s)))
	}

	if *replicas < 1 {
		return fmt.Errorf("--replicas %d: want 1 or more", *replicas)
	}
	start := func(ctx context.Context) ([]*load.Hub, func(), error) {
		args := append([]string{"--log.level", "info"}, hubArgs...)
		if *replicas > 1 {
			if *spreadNS {
				// The uneven spread is the point (a namespace's keys on one
				// replica, decision 051): a replica shedding toward an even
				// count would close proxies the tool does not reconnect.
				// The hub-arg flags come later and win.
				args = append([]string{"--replicas.shed-rate", "0"}, args...)
			}
			return load.StartReplicas(ctx, bin, logPath, *replicas, args...)
		}
		h, err := load.StartHub(ctx, bin, logPath, args...)
		if err != nil {
			return nil, nil, err
		}
		return []*load.Hub{&h.Hub}, func() { h.Stop(10 * time.Second) }, nil
	}

	type runRecord struct {
		Mode     string        `json:"mode"`
		Services int           `json:"services"`
		Proxies  int           `json:"proxies"`
		Run      int           `json:"run"`
		Results  []load.Result `json:"results"`
	}
	var all []runRecord
	var medians []load.Result
	for _, mode := range strings.Split(*modes, ",") {
		mode = strings.TrimSpace(mode)
		if mode != "sotw" && mode != "delta" {
			return fmt.Errorf("--mode %q: want sotw or delta", mode)
		}
		for _, sc := range cross(svcs, ns) {
			services, n := sc[0], sc[1]
			byScenario := map[string][]load.Result{}
			for i := range *runs {
				o := load.Options{Services: services, EndpointsPerCluster: *endpoints, Clusters: clusterNames, Namespaces: *namespaces, EditService: *editSvc, Scoped: *scoped,
					Proxies: n, Gateways: *gateways, Proxyless: *proxyless, Delta: mode == "delta", Scenarios: wantScenarios,
					FanOutEdits: *edits, Settle: *settle, ChurnRate: *rate, ChurnDuration: *duration, FlapOutage: *outage, FlapQuiet: *quiet, FlapClusters: *flapN,
					Timeout: *timeout, Logger: logger, ProfileDir: *profileDir, ProfileSeconds: *profileSec,
					Label: fmt.Sprintf("run%d-", i+1), Idle: *idle, WatchIdle: idleSet, SpreadByNamespace: *spreadNS}
				if *traceDir != "" {
					o.TracePath = filepath.Join(*traceDir, fmt.Sprintf("trace-%s-%d-%d-run%d.csv", mode, services, n, i+1))
				}
				fmt.Fprintf(os.Stderr, "run %d/%d: %s, %d proxies, %d services × %d endpoints × %d clusters, %s ...\n",
					i+1, *runs, mode, n, services, *endpoints, *clusters, describeHub(*replicas))
				t0 := time.Now()
				res, err := load.Run(ctx, o, start)
				if err != nil {
					return fmt.Errorf("%s with %d services and %d proxies, run %d: %w (hub output: %s)", mode, services, n, i+1, err, logPath)
				}
				fmt.Fprintf(os.Stderr, "  done in %s\n", time.Since(t0).Round(time.Second))
				if *verbose {
					_ = load.WriteTable(os.Stderr, res)
				}
				all = append(all, runRecord{Mode: mode, Services: services, Proxies: n, Run: i + 1, Results: res})
				for _, r := range res {
					byScenario[r.Scenario] = append(byScenario[r.Scenario], r)
				}
			}
			for _, s := range []string{"S1", "S2", "S3", "S4", "F1"} {
				if len(byScenario[s]) > 0 {
					medians = append(medians, load.Median(byScenario[s]))
				}
			}
		}
	}
	order := []string{"S1", "S2", "S3", "S4", "F1"}
	slices.SortStableFunc(medians, func(a, b load.Result) int {
		return slices.Index(order, a.Scenario) - slices.Index(order, b.Scenario)
	})

	fmt.Printf("nave load benchmark: %s services × %d endpoints × %d clusters, %s; S3 %s at %g moves/s; S4 outage %s\n",
		*services, *endpoints, *clusters, describeProxies(ns, *gateways, *proxyless), *duration, *rate, *outage)
	fmt.Printf("%d CPUs (GOMAXPROCS %d), %s; hub %s, %s; median of %d run(s)\n\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), bin, describeHub(*replicas), *runs)
	if err := load.WriteTable(os.Stdout, medians); err != nil {
		return err
	}
	if *plotPath != "" {
		if err := writePlot(*plotPath, strings.ToUpper(*plotScen), medians); err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, "plot:", *plotPath)
	}
	if *jsonPath != "" {
		b, err := json.MarshalIndent(map[string]any{"args": os.Args[1:], "runs": all, "medians": medians}, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonPath, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// positiveList parses a comma-separated list of positive numbers.
func positiveList(flagName, list string) ([]int, error) {
	var out []int
	for _, s := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%s %q: want positive numbers", flagName, list)
		}
		out = append(out, n)
	}
	return out, nil
}

// cross is every pair of a and b, a first.
func cross(a, b []int) [][2]int {
	var out [][2]int
	for _, x := range a {
		for _, y := range b {
			out = append(out, [2]int{x, y})
		}
	}
	return out
}

func describeHub(replicas int) string {
	if replicas <= 1 {
		return "one process"
	}
	return fmt.Sprintf("%d replicas (hub CPU-s: their sum; peak RSS: the largest)", replicas)
}

func describeProxies(ns []int, gateways, proxyless int) string {
	var parts []string
	for _, n := range ns {
		g, p := gateways, proxyless
		if g < 0 {
			g = n / 50
		}
		if p < 0 {
			p = n / 20
		}
		parts = append(parts, fmt.Sprintf("%d proxies (%d sidecars, %d gateways, %d proxyless)", n, n-g-p, g, p))
	}
	return strings.Join(parts, " / ")
}

// moduleRoot is the directory of the main module's go.mod.
func moduleRoot() string {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err == nil {
		if mod := strings.TrimSpace(string(out)); mod != "" && mod != os.DevNull {
			return filepath.Dir(mod)
		}
	}
	dir, _ := os.Getwd()
	return dir
}
