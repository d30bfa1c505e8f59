// Command nave-agent is the per-pod agent (docs/agent.md): it keeps the
// workload's certificate, with a key generated in the pod, and serves it to
// Envoy by SDS (running Envoy as its child) or writes it for proxyless
// gRPC, with the xDS bootstrap.
//
//	nave-agent [run] [flags]   run the agent (configured by NAVE_* env, flags or --config)
//	nave-agent capture ...     set up traffic capture for the sidecar (spoke/capture)
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/navemesh/nave/shared/admin"
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
		func(c *agentconfig.Config) logging.Config { return c.Log }, serve)
	stop()
	os.Exit(code)
}

// serve runs the agent until ctx ends.
func serve(ctx context.Context, cfg agentconfig.Config, log *slog.Logger) error {
	lis, err := net.Listen("tcp", cfg.Status.Listen)
	if err != nil {
		return fmt.Errorf("status.listen: %w", err)
	}
	a, err := agent.New(cfg, log, admin.NewRegistry())
	if err != nil {
		lis.Close()
		return err
	}
	go func() {
		// Start-up (config, proto registries, the first key and
		// certificate) leaves garbage a sidecar need not keep resident:
		// hand it back to the OS once, when the agent is in place.
		select {
		case <-a.Keeper().Ready():
			debug.FreeOSMemory()
		case <-ctx.Done():
		}
	}()
	return a.Run(ctx, lis)
}
