// Command nave-demo-client calls the demo's echo service again and again through a gRPC
// channel that the xDS resolver configures from the hub, and shows which instance
// answered each call: one JSON line per call (--json), or every --report interval a
// summary of the split between instances.
//
// With --xds-cert-dir (a workload certificate, as navectl cert issue writes it) and
// --xds-ca-file (the hub's serving CA) it talks to the hub over mTLS; the calls to the
// echo backends stay plaintext gRPC.
//
//	nave-demo-client --hub 127.0.0.1:15010 --node-id demo-client.demo [--header x-user=beta]
//	nave-demo-client --hub 127.0.0.1:15010 --node-id demo-client.demo --xds-cert-dir certs --xds-ca-file hub-ca.pem
//	nave-demo-client --bootstrap bootstrap.json --json --count 100
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	_ "google.golang.org/grpc/xds" // registers the xds:/// resolver and the xDS balancers
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run makes calls until SIGINT, SIGTERM or --count and returns the process exit code.
// Before anything dials, it may replace the process with itself under the environment
// that points grpc's xDS client at the right bootstrap (see bootstrap.go).
func run(args []string, stdout, stderr io.Writer) int {
	opts, err := parseFlags(args, stderr)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "nave-demo-client: %v\n", err)
		return 2
	}
	env, err := bootstrapEnv(opts, os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "nave-demo-client: %v\n", err)
		return 2
	}
	if env != nil {
		if err := reexecWith(*env); err != nil {
			fmt.Fprintf(stderr, "nave-demo-client: %v\n", err)
			return 1
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	// With a workload certificate (--xds-cert-dir, or a bootstrap that
	// declares certificate providers, as nave-agent writes) the client
	// speaks mTLS to workloads whose DestinationRule says ISTIO_MUTUAL
	// (the hub's config decides); to the rest, and without one, plain text.
	creds := insecure.NewCredentials()
	if opts.xdsCertDir != "" || declaresCertificates(os.Getenv(bootstrapFileEnv)) {
		if creds, err = xdscreds.NewClientCredentials(xdscreds.ClientOptions{FallbackCreds: insecure.NewCredentials()}); err != nil {
			fmt.Fprintf(stderr, "nave-demo-client: %v\n", err)
			return 2
		}
	}
	conn, err := grpc.NewClient(opts.target, grpc.WithTransportCredentials(creds))
	if err != nil {
		fmt.Fprintf(stderr, "nave-demo-client: dial %s: %v\n", opts.target, err)
		return 2
	}
	defer conn.Close()

	var out sink = newSummary(stdout)
	if opts.json {
		out = newJSONLines(stdout)
	}
	c := newCaller(conn, opts.timeout, opts.headers)
	if err := drive(ctx, c.call, out, opts.pacing); err != nil {
		fmt.Fprintf(stderr, "nave-demo-client: %v\n", err)
		return 1
	}
	return 0
}
