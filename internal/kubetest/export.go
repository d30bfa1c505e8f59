package kubetest

// Process is a server a test started with StartProcess (internal/kubenode's kubelet, containerd,
// controller manager): its output goes to a log file, and the kernel kills it if the test binary
// dies. Its methods may be called from any goroutine; Stop more than once.
type Process struct{ p *process }

// StartProcess runs bin with args, its stdout and stderr appended to logPath.
func StartProcess(name, bin, logPath string, args ...string) (*Process, error) {
	p, err := startProcess(name, bin, logPath, args...)
	if err != nil {
		return nil, err
	}
	return &Process{p: p}, nil
}

// Name is the name the process was started with.
func (p *Process) Name() string { return p.p.name }

// PID is the process's id.
func (p *Process) PID() int { return p.p.cmd.Process.Pid }

// Exited reports whether the process has exited, and if so its exit status.
func (p *Process) Exited() (bool, error) {
	if !p.p.exited() {
		return false, nil
	}
	return true, p.p.err
}

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.p.done }

// Stop sends SIGTERM, waits up to 10 s, then kills the process; it returns once it has exited.
func (p *Process) Stop() { p.p.stop() }

// Tail returns the last n lines of the process's log.
func (p *Process) Tail(n int) string { return p.p.tail(n) }
