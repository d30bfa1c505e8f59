// Command nave-demo-backend is one instance of the demo's echo service: a gRPC server that
// answers the standard gRPC health service and names itself in the x-nave-backend response
// header of every call, so a client can see which instance its request reached. It can
// fail a fraction of calls with UNAVAILABLE and delay every call, to show retries and
// timeouts at work.
//
// With --xds it is a proxyless gRPC server of the mesh: grpc-go's xDS server, configured by the
// hub through the bootstrap GRPC_XDS_BOOTSTRAP names (an injected pod's agent writes it), so
// a STRICT PeerAuthentication makes it accept mutual TLS only.
//
//	nave-demo-backend --listen 127.0.0.1:17071 --name echo-v1 [--fail-rate 0.1] [--delay 50ms] [--xds]
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// options are the command-line settings of one backend.
type options struct {
	listen   string
	name     string
	failRate float64
	delay    time.Duration
	grace    time.Duration
	xds      bool
}

func parseFlags(args []string, output io.Writer) (options, error) {
	var o options
	fs := pflag.NewFlagSet("nave-demo-backend", pflag.ContinueOnError)
	fs.SetOutput(output)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:17071", "address to serve gRPC on")
	fs.StringVar(&o.name, "name", "echo-v1", "instance name sent in the x-nave-backend response header")
	fs.Float64Var(&o.failRate, "fail-rate", 0, "fraction of calls, 0 to 1, failed with UNAVAILABLE")
	fs.DurationVar(&o.delay, "delay", 0, "time each call waits before it is answered")
	fs.DurationVar(&o.grace, "grace", 5*time.Second, "how long in-flight calls may finish at shutdown before they are cut")
	fs.BoolVar(&o.xds, "xds", false, "serve as grpc-go's xDS server (bootstrap in GRPC_XDS_BOOTSTRAP): the hub's listener sets its transport security")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.name == "":
		return o, errors.New("--name must not be empty")
	case o.failRate < 0 || o.failRate > 1:
		return o, fmt.Errorf("--fail-rate %v is not between 0 and 1", o.failRate)
	case o.delay < 0 || o.grace < 0:
		return o, errors.New("--delay and --grace must not be negative")
	}
	return o, nil
}

// run serves until SIGINT or SIGTERM and returns the process exit code.
func run(args []string, stderr io.Writer) int {
	opts, err := parseFlags(args, stderr)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "nave-demo-backend: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	log := slog.New(slog.NewTextHandler(stderr, nil))
	lis, err := net.Listen("tcp", opts.listen)
	if err != nil {
		fmt.Fprintf(stderr, "nave-demo-backend: %v\n", err)
		return 1
	}
	b := &backend{name: opts.name, failRate: opts.failRate, delay: opts.delay, roll: rand.Float64}
	srv, err := newServer(b, opts.xds, log)
	if err != nil {
		lis.Close()
		fmt.Fprintf(stderr, "nave-demo-backend: %v\n", err)
		return 1
	}
	log.Info("backend serving", "name", opts.name, "addr", lis.Addr().String(), "fail_rate", opts.failRate, "delay", opts.delay, "xds", opts.xds)
	if err := serve(ctx, lis, srv, b, opts.grace, log); err != nil {
		fmt.Fprintf(stderr, "nave-demo-backend: %v\n", err)
		return 1
	}
	return 0
}
