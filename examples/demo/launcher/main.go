// Command nave-demo runs the whole demo that `make run` shows: a hub, a spoke that reads
// the mesh config from a directory, three echo backends, and a client that calls the echo
// service through the hub and prints how its calls split between the backends.
//
//	nave-demo --bin bin --config examples/config [--work .cache/demo] [--plaintext] [-- CLIENT FLAGS...]
//
// Unless --plaintext, the hub serves TLS and the launcher does what an operator does, with
// navectl on the hub's state directory: once the hub is ready, it creates a join token for
// the spoke, pins the hub's serving CA and issues the client a workload certificate; the
// spoke enrolls with the token and the pin, the client dials the hub over mTLS. Every run
// starts from fresh state: it removes the last run's state from the work directory.
//
// The hub, spoke and backends write to log files in the work directory; the client
// writes to the terminal. Arguments after "--" go to the client (e.g. --header
// x-user=beta). Ctrl-C or SIGTERM stops every child: SIGTERM first, SIGKILL after the
// grace period.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the launcher's command-line settings.
type options struct {
	bin          string
	config       string
	work         string
	hubAdmin     string
	hubSpokes    string
	hubXDS       string
	spokeAdmin   string
	mesh         string
	cluster      string
	nodeID       string
	plaintext    bool
	readyTimeout time.Duration
	grace        time.Duration
	clientArgs   []string
}

func parseFlags(args []string, output io.Writer) (options, error) {
	var o options
	fs := pflag.NewFlagSet("nave-demo", pflag.ContinueOnError)
	fs.SetOutput(output)
	fs.StringVar(&o.bin, "bin", "bin", "directory holding nave-hub, nave-spoke, nave-demo-backend and nave-demo-client")
	fs.StringVar(&o.config, "config", "examples/config", "directory of mesh config YAML the spoke reads")
	fs.StringVar(&o.work, "work", ".cache/demo", "directory for the log files and the hub's and spoke's state (removed at start)")
	fs.StringVar(&o.hubAdmin, "hub-admin", "127.0.0.1:15014", "hub admin (health) address")
	fs.StringVar(&o.hubSpokes, "hub-spokes", "127.0.0.1:15012", "hub address spokes dial")
	fs.StringVar(&o.hubXDS, "hub-xds", "127.0.0.1:15010", "hub xDS address proxies and the client dial")
	fs.StringVar(&o.spokeAdmin, "spoke-admin", "127.0.0.1:15024", "spoke admin (health) address")
	fs.StringVar(&o.mesh, "mesh", "default", "mesh the spoke and the client belong to")
	fs.StringVar(&o.cluster, "cluster", "demo-cluster", "cluster name of the spoke")
	fs.StringVar(&o.nodeID, "node-id", "demo-client.demo", "xDS node id of the client")
	fs.BoolVar(&o.plaintext, "plaintext", false, "run without TLS and enrollment: the hub with --tls.plaintext, the spoke with --hub.plaintext, the client without a certificate")
	fs.DurationVar(&o.readyTimeout, "ready-timeout", 30*time.Second, "how long the hub and spoke have to become ready")
	fs.DurationVar(&o.grace, "grace", 5*time.Second, "how long children have to exit after SIGTERM before they are killed")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.ArgsLenAtDash() < 0 && fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q (client flags go after --)", fs.Args())
	}
	o.clientArgs = fs.Args()
	if o.readyTimeout <= 0 || o.grace < 0 {
		return o, errors.New("--ready-timeout must be positive and --grace not negative")
	}
	return o, nil
}

// run starts the demo, waits for a signal or for a child to end, stops every child and
// returns the process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	opts, err := parseFlags(args, stderr)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "nave-demo: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// After the first signal, the next one gets its default action and ends the launcher
	// at once; the kernel then kills the children (Pdeathsig).
	go func() {
		<-ctx.Done()
		stop()
	}()
	p, err := prepare(opts)
	if err != nil {
		fmt.Fprintf(stderr, "nave-demo: %v\n", err)
		return 1
	}

	g := newGroup(stdout, stderr)
	err = supervise(ctx, g, p, opts, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "nave-demo: %v\n", err)
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "nave-demo: stopping (Ctrl-C again kills everything at once)")
	} else {
		fmt.Fprintln(stderr, "nave-demo: stopping")
	}
	g.stop(opts.grace)
	fmt.Fprintln(stderr, "nave-demo: stopped")
	if err != nil {
		return 1
	}
	return 0
}
