package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// prepare checks what the demo needs before anything starts, creates the work directory
// and lays out the processes.
func prepare(o options) (plan, error) {
	configDir, err := filepath.Abs(o.config)
	if err != nil {
		return plan{}, fmt.Errorf("--config %s: %w", o.config, err)
	}
	if fi, err := os.Stat(configDir); err != nil || !fi.IsDir() {
		return plan{}, fmt.Errorf("--config %s: not a directory", o.config)
	}
	p := makePlan(o, configDir)
	for _, s := range slices.Concat(p.services, []spec{p.client}) {
		if _, err := os.Stat(s.path); err != nil {
			return plan{}, fmt.Errorf("%s: %w (build the binaries first: make build)", s.name, err)
		}
	}
	if err := os.MkdirAll(o.work, 0o755); err != nil {
		return plan{}, fmt.Errorf("create work directory: %w", err)
	}
	return p, nil
}

// supervise starts the services, waits for the control plane, starts the client and
// watches them all. It returns nil when ctx ends or the client finished its calls, and an
// error naming the child when one exited on its own or the control plane did not become
// ready. It leaves stopping the children to the caller.
func supervise(ctx context.Context, g *group, p plan, o options, stdout io.Writer) error {
	for _, s := range p.services {
		c, err := g.start(s)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "nave-demo: started %-7s pid %-7d log %s\n", s.name, c.pid(), s.logPath)
	}

	readyCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready := make(chan error, 1)
	go func() { ready <- waitReady(readyCtx, p.probes, o.readyTimeout) }()

	var client *child
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-ready:
			if ctx.Err() != nil {
				continue // interrupted: the ctx.Done case reports it
			}
			if err != nil {
				return err
			}
			printBanner(stdout, o)
			c, err := g.start(p.client)
			if err != nil {
				return err
			}
			client = c
			fmt.Fprintf(stdout, "nave-demo: started %-7s pid %-7d output below\n", c.name, c.pid())
		case c := <-g.exits:
			if c == client && c.err == nil {
				return nil // the client made the calls it was asked to (--count)
			}
			return fmt.Errorf("%s (pid %d) exited unexpectedly (%s); %s", c.name, c.pid(), c.cmd.ProcessState, c.where())
		}
	}
}
