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
	"strings"
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
	Grace time.Duration
	// Drain is how long Envoy drains before SIGTERM when the agent stops
	// (ProxyConfig's terminationDrainDuration): Envoy is started with
	// --drain-time-s of it and --drain-strategy immediate, asked to drain
	// its listeners gracefully, and stopped once it has no connection
	// left or Drain has passed. Zero stops it at once.
	Drain time.Duration
	// ExitOnZero is proxyMetadata EXIT_ON_ZERO_ACTIVE_CONNECTIONS. Unset
	// (nil), the drain ends when Envoy has no connection left or Drain
	// has passed, whichever comes first. Set, it means what it means to
	// Istio's pilot-agent: true waits MinDrain, then until Envoy has no
	// connection left, however long that takes (the pod's grace period
	// bounds it; an admin that does not answer ends the wait); false
	// waits the whole Drain, connections or not.
	ExitOnZero *bool
	// MinDrain is proxyMetadata MINIMUM_DRAIN_DURATION, the least an
	// ExitOnZero true drain lasts (Istio's default, 5 s, when zero).
	MinDrain time.Duration
	// DrainPoll is how often Envoy's connections are counted while it
	// drains; zero means 1 s.
	DrainPoll      time.Duration
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

// Run starts Envoy and waits for it. When ctx ends it drains Envoy (see
// Drain), sends it SIGTERM (which Envoy handles as SIGINT: a graceful
// exit), waits up to Grace and kills it, and returns nil. When Envoy exits on its own it returns an
// error wrapping ErrEnvoyExited with the exit status.
func (e *Envoy) Run(ctx context.Context) error {
	args := []string{"-c", e.Bootstrap}
	if e.Drain > 0 {
		args = append(args, "--drain-time-s", strconv.Itoa(max(1, int(e.Drain.Round(time.Second)/time.Second))), "--drain-strategy", "immediate")
	}
	cmd := exec.Command(e.Binary, args...)
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
	if e.Drain > 0 {
		dctx, cancel := context.WithCancel(context.Background())
		drained := make(chan struct{})
		go func() {
			defer close(drained)
			e.DrainConnections(dctx)
		}()
		select {
		case <-drained:
			cancel()
		case err := <-done:
			cancel()
			<-drained
			e.Log.Info("envoy exited while draining", "status", exitStatus(err))
			return nil
		}
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

// DefaultMinDrain is Istio's MINIMUM_DRAIN_DURATION.
const DefaultMinDrain = 5 * time.Second

// DrainConnections asks Envoy's admin to drain every listener gracefully
// (POST /drain_listeners?graceful) and waits until Envoy reports no
// connection left (server.total_connections), Drain has passed or ctx
// ends. An admin that does not answer is retried until then: draining
// never shortens the wait, it only ends it early. ExitOnZero changes
// when the wait ends (see it).
func (e *Envoy) DrainConnections(ctx context.Context) {
	start := time.Now()
	istioExit := e.ExitOnZero != nil && *e.ExitOnZero
	if !istioExit {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.Drain)
		defer cancel()
	}
	poll := e.DrainPoll
	if poll == 0 {
		poll = time.Second
	}
	e.Log.Info("draining envoy", "for", e.Drain, "exitOnZeroActiveConnections", e.ExitOnZero)
	if _, err := e.admin(ctx, http.MethodPost, "/drain_listeners?graceful"); err != nil {
		e.Log.Warn("envoy not asked to drain; waiting the drain duration anyway", "err", err)
	}
	if e.ExitOnZero != nil && !*e.ExitOnZero {
		<-ctx.Done()
		e.Log.Info("envoy drain time over", "after", time.Since(start))
		return
	}
	if istioExit {
		least := e.MinDrain
		if least == 0 {
			least = DefaultMinDrain
		}
		t := time.NewTimer(least)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		n, err := e.connections(ctx)
		if err == nil && n == 0 {
			e.Log.Info("envoy drained: no connection left", "after", time.Since(start))
			return
		}
		if err != nil && istioExit {
			e.Log.Warn("envoy connections unknown; drain ends", "after", time.Since(start), "err", err)
			return
		}
		select {
		case <-ctx.Done():
			e.Log.Info("envoy drain time over", "after", time.Since(start), "connections", n)
			return
		case <-tick.C:
		}
	}
}

// drainClient talks to Envoy's admin while it drains: no connection is
// kept between requests (the admin's own connections are not counted
// anyway, and the agent is stopping).
var drainClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// admin sends one request to Envoy's admin and returns its body (status
// 200 only).
func (e *Envoy) admin(ctx context.Context, method, path string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://127.0.0.1:"+strconv.Itoa(e.AdminPort)+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := drainClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("envoy admin %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("envoy admin %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("envoy admin %s: %s", path, resp.Status)
	}
	return body, nil
}

// connectionsStat is the gauge of Envoy's open downstream connections.
const connectionsStat = "server.total_connections"

// connections reads Envoy's connection count from its admin's stats.
func (e *Envoy) connections(ctx context.Context) (int, error) {
	body, err := e.admin(ctx, http.MethodGet, "/stats?filter=^server%5C.total_connections$")
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), connectionsStat+":"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return 0, fmt.Errorf("envoy stat %s: %q is not a number", connectionsStat, v)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("envoy stats have no %s", connectionsStat)
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
