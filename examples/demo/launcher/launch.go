package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// prepare checks what the demo needs before anything starts, creates the work directory,
// removes the state an earlier run left there and lays out the processes.
func prepare(o options) (plan, error) {
	configDir, err := filepath.Abs(o.config)
	if err != nil {
		return plan{}, fmt.Errorf("--config %s: %w", o.config, err)
	}
	if fi, err := os.Stat(configDir); err != nil || !fi.IsDir() {
		return plan{}, fmt.Errorf("--config %s: not a directory", o.config)
	}
	p := makePlan(o, configDir)
	bins := slices.Concat([]spec{p.hub}, p.backends, []spec{p.spoke, p.client})
	if !p.plaintext {
		bins = append(bins, spec{name: "navectl", path: p.state.navectl})
	}
	for _, s := range bins {
		if _, err := os.Stat(s.path); err != nil {
			return plan{}, fmt.Errorf("%s: %w (build the binaries first: make build)", s.name, err)
		}
	}
	if err := os.MkdirAll(o.work, 0o755); err != nil {
		return plan{}, fmt.Errorf("create work directory: %w", err)
	}
	if err := removeState(p.state); err != nil {
		return plan{}, err
	}
	return p, nil
}

// errInterrupted is what await returns when the launcher's context ends.
var errInterrupted = errors.New("interrupted")

// supervise starts the hub and the backends, waits for the hub, enrolls (unless in
// plaintext), starts the spoke, waits for it, starts the client and watches them all. It
// returns nil when ctx ends or the client finished its calls, and an error naming the
// child when one exited on its own, the control plane did not become ready or an
// enrollment step failed. It leaves stopping the children to the caller.
func supervise(ctx context.Context, g *group, p plan, o options, stdout, stderr io.Writer) error {
	err := superviseSteps(ctx, g, p, o, stdout, stderr)
	if errors.Is(err, errInterrupted) {
		return nil
	}
	return err
}

func superviseSteps(ctx context.Context, g *group, p plan, o options, stdout, stderr io.Writer) error {
	for _, s := range slices.Concat([]spec{p.hub}, p.backends) {
		if err := startService(g, s, stdout); err != nil {
			return err
		}
	}
	if err := await(ctx, g, func(ctx context.Context) error {
		return waitReady(ctx, []probe{p.hubProbe}, o.readyTimeout)
	}); err != nil {
		return err
	}

	spoke := p.spoke
	if !p.plaintext {
		var pin string
		if err := await(ctx, g, func(ctx context.Context) error {
			var err error
			pin, err = secureSetup(ctx, p.state, o, stdout, stderr)
			return err
		}); err != nil {
			return err
		}
		spoke.args = append(slices.Clone(spoke.args), "--hub.ca-hash", pin)
	}
	if err := startService(g, spoke, stdout); err != nil {
		return err
	}
	if err := await(ctx, g, func(ctx context.Context) error {
		return waitReady(ctx, []probe{p.spokeProbe}, o.readyTimeout)
	}); err != nil {
		return err
	}

	printBanner(stdout, o, p)
	client, err := g.start(p.client)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "nave-demo: started %-7s pid %-7d output below\n", client.name, client.pid())
	for {
		select {
		case <-ctx.Done():
			return nil
		case c := <-g.exits:
			if c == client && c.err == nil {
				return nil // the client made the calls it was asked to (--count)
			}
			return unexpectedExit(c)
		}
	}
}

// startService starts s, whose output goes to its log file, and says so.
func startService(g *group, s spec, stdout io.Writer) error {
	c, err := g.start(s)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "nave-demo: started %-7s pid %-7d log %s\n", s.name, c.pid(), s.logPath)
	return nil
}

// await runs step while watching the children, none of which may exit meanwhile. It
// returns step's error; an error naming the child when one exits first (step's context
// is then cancelled); or errInterrupted when ctx ends.
func await(ctx context.Context, g *group, step func(context.Context) error) error {
	stepCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- step(stepCtx) }()
	// Whatever ends the wait, step ends before await returns: its results are read only
	// when it finished first, but it must not outlive the call.
	select {
	case <-ctx.Done():
		cancel()
		<-done
		return errInterrupted
	case err := <-done:
		if ctx.Err() != nil {
			return errInterrupted
		}
		return err
	case c := <-g.exits:
		cancel()
		<-done
		return unexpectedExit(c)
	}
}

func unexpectedExit(c *child) error {
	return fmt.Errorf("%s (pid %d) exited unexpectedly (%s); %s", c.name, c.pid(), c.cmd.ProcessState, c.where())
}
