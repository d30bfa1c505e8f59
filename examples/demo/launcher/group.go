package main

import (
	"fmt"
	"io"
	"syscall"
	"time"
)

// group is the set of children the launcher started and stops. Not safe for concurrent
// use: one goroutine starts and stops; the children's wait goroutines only send on exits.
type group struct {
	stdout, stderr io.Writer
	children       []*child
	// exits receives each child when it exits. Its buffer holds one entry per child
	// (maxChildren), so a wait goroutine never blocks on it.
	exits chan *child
}

// maxChildren bounds how many children one group starts.
const maxChildren = 16

func newGroup(stdout, stderr io.Writer) *group {
	return &group{stdout: stdout, stderr: stderr, exits: make(chan *child, maxChildren)}
}

// start starts s as one more child of the group.
func (g *group) start(s spec) (*child, error) {
	if len(g.children) == maxChildren {
		return nil, fmt.Errorf("start %s: already %d children", s.name, maxChildren)
	}
	c, err := startChild(s, g.stdout, g.stderr, g.exits)
	if err != nil {
		return nil, err
	}
	g.children = append(g.children, c)
	return c, nil
}

// stop sends SIGTERM to every child still running, gives them grace to exit, sends
// SIGKILL to those that have not, and returns once every child has been reaped. It
// reports each child it had to kill on stderr.
func (g *group) stop(grace time.Duration) {
	for _, c := range g.children {
		if err := c.signal(syscall.SIGTERM); err != nil {
			fmt.Fprintf(g.stderr, "nave-demo: %v\n", err)
		}
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	if !g.waitUntil(deadline.C) {
		for _, c := range g.children {
			if c.exited() {
				continue
			}
			fmt.Fprintf(g.stderr, "nave-demo: %s (pid %d) still running %v after SIGTERM, killing it\n", c.name, c.pid(), grace)
			if err := c.signal(syscall.SIGKILL); err != nil {
				fmt.Fprintf(g.stderr, "nave-demo: %v\n", err)
			}
		}
	}
	for _, c := range g.children {
		<-c.done
	}
}

// waitUntil waits for every child to exit or for deadline, and reports whether every
// child exited.
func (g *group) waitUntil(deadline <-chan time.Time) bool {
	for _, c := range g.children {
		select {
		case <-c.done:
		case <-deadline:
			return false
		}
	}
	return true
}
