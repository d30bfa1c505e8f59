package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
)

// spec says how to start one child process.
type spec struct {
	name    string   // what the launcher calls it: "hub", "spoke", "echo-v1", "client"
	path    string   // executable
	args    []string // arguments after the executable
	logPath string   // file that gets its output; empty to share the launcher's terminal
}

// child is one started process. The wait goroutine reaps it, records how it ended, closes
// done and reports it on the exits channel given to startChild. Safe for concurrent use;
// err may be read only once done is closed.
type child struct {
	spec
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// startChild starts s. Its output goes to s.logPath, truncated first, or else to stdout
// and stderr. The child gets its own process group, so a Ctrl-C at the terminal reaches
// only the launcher, which then stops the children in order; and it is killed by the
// kernel if the launcher dies without stopping it (Pdeathsig).
func startChild(s spec, stdout, stderr io.Writer, exits chan<- *child) (*child, error) {
	cmd := exec.Command(s.path, s.args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if s.logPath != "" {
		f, err := os.Create(s.logPath)
		if err != nil {
			return nil, fmt.Errorf("create log of %s: %w", s.name, err)
		}
		// The child holds its own descriptor once started; the launcher's copy can go.
		defer f.Close()
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", s.name, s.path, err)
	}
	c := &child{spec: s, cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
		exits <- c
	}()
	return c, nil
}

// pid is the child's process id.
func (c *child) pid() int { return c.cmd.Process.Pid }

// exited reports whether the child has exited and been reaped.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the child unless it has already exited.
func (c *child) signal(sig syscall.Signal) error {
	err := c.cmd.Process.Signal(sig)
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %s to %s (pid %d): %w", sig, c.name, c.pid(), err)
	}
	return nil
}

// where tells a user where to look for the child's output.
func (c *child) where() string {
	if c.logPath == "" {
		return "its output is above"
	}
	return "log: " + c.logPath
}
