// Command nave-load runs issue 6's load benchmark against a real nave-hub
// process and prints a table (median of --runs runs). See
// docs/load-benchmark.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/navemesh/nave/e2e/loadgen"
)

func main() {
	var cfg loadgen.Config
	runs := flag.Int("runs", 1, "runs; the table shows the median of each number")
	flag.StringVar(&cfg.HubBinary, "hub", "", "nave-hub binary (default: built from this module into a temporary directory)")
	flag.IntVar(&cfg.Services, "services", 1000, "services (ServiceEntries with workload selectors, over 10 namespaces)")
	flag.IntVar(&cfg.Endpoints, "endpoints", 5, "endpoints per service per cluster (three clusters)")
	flag.IntVar(&cfg.Proxies, "proxies", 500, "Envoy-like sidecar ADS streams")
	flag.BoolVar(&cfg.Delta, "delta", false, "use delta ADS instead of state of the world")
	flag.DurationVar(&cfg.ChurnFor, "churn-for", 60*time.Second, "S3: how long endpoints churn")
	flag.IntVar(&cfg.ChurnRate, "churn-rate", 30, "S3: endpoint events per second")
	flag.DurationVar(&cfg.FlapFor, "flap-for", 10*time.Second, "S4: how long one spoke stays away")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.HubBinary == "" {
		dir, err := os.MkdirTemp("", "nave-load-")
		if err != nil {
			fail(err)
		}
		defer os.RemoveAll(dir)
		cfg.HubBinary = filepath.Join(dir, "nave-hub")
		build := exec.CommandContext(ctx, "go", "build", "-o", cfg.HubBinary, "github.com/navemesh/nave/hub/cmd/nave-hub")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fail(fmt.Errorf("building nave-hub: %w", err))
		}
	}
	cfg.Progress = os.Stderr
	var all [][]loadgen.Result
	for i := range *runs {
		fmt.Fprintf(os.Stderr, "== run %d of %d\n", i+1, *runs)
		res, err := loadgen.Run(ctx, cfg)
		if err != nil {
			fail(err)
		}
		all = append(all, res)
	}
	mode := "state of the world"
	if cfg.Delta {
		mode = "delta"
	}
	fmt.Printf("nave load benchmark: %d services × %d endpoints × 3 clusters, %d sidecars, %s ADS, median of %d run(s)\n\n",
		cfg.Services, cfg.Endpoints, cfg.Proxies, mode, *runs)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "scenario\tsamples\tp50\tp99\tmax\thub CPU-s\tpeak RSS MiB\tMB to proxies\tresponses\tunexpected\t")
	for s := range all[0] {
		med := func(f func(loadgen.Result) float64) float64 {
			var v []float64
			for _, r := range all {
				v = append(v, f(r[s]))
			}
			slices.Sort(v)
			return v[len(v)/2]
		}
		ms := func(f func(loadgen.Result) time.Duration) string {
			return fmt.Sprintf("%.0f ms", med(func(r loadgen.Result) float64 { return float64(f(r)) / 1e6 }))
		}
		fmt.Fprintf(w, "%s\t%.0f\t%s\t%s\t%s\t%.2f\t%.0f\t%.1f\t%.0f\t%.0f\t\n", all[0][s].Scenario,
			med(func(r loadgen.Result) float64 { return float64(r.N) }),
			ms(func(r loadgen.Result) time.Duration { return r.P50 }), ms(func(r loadgen.Result) time.Duration { return r.P99 }),
			ms(func(r loadgen.Result) time.Duration { return r.Max }),
			med(func(r loadgen.Result) float64 { return r.HubCPU.Seconds() }),
			med(func(r loadgen.Result) float64 { return float64(r.PeakRSS) / (1 << 20) }),
			med(func(r loadgen.Result) float64 { return float64(r.Bytes) / 1e6 }),
			med(func(r loadgen.Result) float64 { return float64(r.Responses) }),
			med(func(r loadgen.Result) float64 { return float64(r.UnaffectedReplies) }))
	}
	w.Flush()
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "nave-load:", err)
	os.Exit(1)
}
