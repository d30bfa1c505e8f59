// Command nave-agent is the per-pod agent (docs/agent.md): it keeps the
// workload's certificate, with a key generated in the pod, and serves it to
// Envoy by SDS (running Envoy as its child) or writes it for proxyless
// gRPC, with the xDS bootstrap. The agent lives in spoke/agent.
//
//	nave-agent [run] [flags]   run the agent (configured by NAVE_* env, flags or --config)
//	nave-agent capture ...     set up traffic capture for the sidecar (spoke/capture)
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/navemesh/nave/shared/logging"
	"github.com/navemesh/nave/shared/program"
	"github.com/navemesh/nave/spoke/agent"
	"github.com/navemesh/nave/spoke/agentconfig"
	"github.com/navemesh/nave/spoke/capture"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "capture" {
		// the sidecar template's nave-init container: traffic capture (docs/injection.md)
		os.Exit(capture.Main(args[1:]))
	}
	if len(args) > 0 && args[0] == "run" {
		args = args[1:]
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := program.Run(ctx, agentconfig.Program, args, os.Stdout, os.Stderr,
		func(c *agentconfig.Config) logging.Config { return c.Log }, agent.Serve)
	stop()
	os.Exit(code)
}
