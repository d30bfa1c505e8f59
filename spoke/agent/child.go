package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// Envoy runs Envoy as the agent's child. A plain value: Run it once.
type Envoy struct {
	// Binary is Envoy's path; Bootstrap the bootstrap file given with -c.
	Binary, Bootstrap string
	// AdminPort is Envoy's admin on 127.0.0.1, polled for readiness.
	AdminPort int
	// Grace is how long Envoy has to exit after SIGTERM before it is
	// killed.
	Grace          time.Duration
	Stdout, Stderr io.Writer
	Log            *slog.Logger
}

// ErrEnvoyExited wraps the reason Envoy stopped on its own.
var ErrEnvoyExited = errors.New("envoy exited")

// Present reports whether the binary exists.
func (e *Envoy) Present() bool {
	fi, err := os.Stat(e.Binary)
	return err == nil && !fi.IsDir()
}

// Run starts Envoy and waits for it. When ctx ends it sends Envoy SIGTERM
// (which Envoy handles as SIGINT: a graceful exit), waits up to Grace and
// kills it, and returns nil. When Envoy exits on its own it returns an
// error wrapping ErrEnvoyExited with the exit status.
func (e *Envoy) Run(ctx context.Context) error {
	cmd := exec.Command(e.Binary, "-c", e.Bootstrap)
	cmd.Stdout, cmd.Stderr = e.Stdout, e.Stderr
	// Envoy must not outlive the agent (a container dies with its first
	// process anyway; this also holds outside one).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start envoy %s: %w", e.Binary, err)
	}
	e.Log.Info("envoy started", "pid", cmd.Process.Pid, "binary", e.Binary, "bootstrap", e.Bootstrap)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			return fmt.Errorf("%w with status 0", ErrEnvoyExited)
		}
		return fmt.Errorf("%w: %v", ErrEnvoyExited, err)
	case <-ctx.Done():
	}
	e.Log.Info("stopping envoy", "pid", cmd.Process.Pid, "grace", e.Grace)
	_ = cmd.Process.Signal(syscall.SIGTERM) // fails only if it already exited, which done reports
	t := time.NewTimer(e.Grace)
	defer t.Stop()
	select {
	case err := <-done:
		e.Log.Info("envoy stopped", "status", exitStatus(err))
	case <-t.C:
		_ = cmd.Process.Kill()
		err := <-done
		e.Log.Warn("envoy did not stop in time; killed", "grace", e.Grace, "status", exitStatus(err))
	}
	return nil
}

func exitStatus(err error) string {
	if err == nil {
		return "0"
	}
	return err.Error()
}

// Ready asks Envoy's admin whether it is ready (/ready answers 200 once
// Envoy has its initial config).
func (e *Envoy) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(e.AdminPort)+"/ready", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("envoy admin: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("envoy is not ready: %s %s", resp.Status, body)
	}
	return nil
}
