package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"

	"github.com/navemesh/nave/shared/admin"
	"github.com/navemesh/nave/spoke/agentconfig"
)

// Serve runs an agent with cfg until ctx ends: nave-agent's life. It
// listens on status.listen, builds the agent (New) and runs it (Run).
func Serve(ctx context.Context, cfg agentconfig.Config, log *slog.Logger) error {
	lis, err := net.Listen("tcp", cfg.Status.Listen)
	if err != nil {
		return fmt.Errorf("status.listen: %w", err)
	}
	a, err := New(cfg, log, admin.NewRegistry())
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
