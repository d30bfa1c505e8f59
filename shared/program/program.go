// Package program is the common life of nave's binaries: load the typed
// configuration, build the logger, run until SIGINT/SIGTERM, and map the
// outcome to an exit code (0 done, 1 failed, 2 bad configuration).
package program

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/navemesh/nave/shared/logging"
	"github.com/navemesh/nave/shared/settings"
)

// Version and Revision name the build: make images sets them with -ldflags
// "-X github.com/navemesh/nave/shared/program.Version=..." (internal/imagebuild);
// a plain go build leaves them as they are here.
var (
	Version  = "dev"
	Revision = "unknown"
)

// Main runs serve under a context cancelled by SIGINT or SIGTERM and
// exits the process with Run's code.
func Main[C any](name string, logOf func(*C) logging.Config, serve func(context.Context, C, *slog.Logger) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Run(ctx, name, os.Args[1:], os.Stdout, os.Stderr, logOf, serve)
	stop()
	os.Exit(code)
}

// Run loads C from args (see settings.Load), builds the logger its log
// section describes, and calls serve until it returns.
func Run[C any](ctx context.Context, name string, args []string, stdout, stderr io.Writer,
	logOf func(*C) logging.Config, serve func(context.Context, C, *slog.Logger) error) int {
	var cfg C
	if err := settings.Load(name, &cfg, args, stdout); err != nil {
		if errors.Is(err, settings.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "%s: invalid configuration: %v\n", name, err)
		return 2
	}
	log, err := logOf(&cfg).Logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	log.Info("starting", "program", name, "version", Version, "revision", Revision)
	if err := serve(ctx, cfg, log); err != nil {
		log.Error("stopped", "program", name, "err", err)
		return 1
	}
	log.Info("stopped", "program", name)
	return 0
}
