// Package harness starts nave's real binaries as processes for end-to-end
// tests and benchmarks, and always stops them: every process is killed by
// PID when the test ends, with a deadline.
package harness

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/navemesh/nave/internal/freeport"
	"github.com/navemesh/nave/internal/testwait"
)

// Build compiles the named packages (binary name -> package path) into dir.
func Build(dir string, pkgs map[string]string) error {
	for name, pkg := range pkgs {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), pkg)
		cmd.Dir = ModuleRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
	}
	return nil
}

// ModuleRoot finds the directory holding go.mod above the working directory.
func ModuleRoot() string {
	dir, _ := os.Getwd()
	for d := dir; d != "/"; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
	}
	return dir
}

// FreePort returns a loopback TCP port that was free a moment ago, one this
// process has not handed out before, below the kernel's ephemeral range
// (internal/freeport).
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Proc is a started process whose output goes to a log file (and, if
// Lines is used, line by line to the test).
type Proc struct {
	Name    string
	Cmd     *exec.Cmd
	LogPath string
	done    chan struct{}
	waitErr error

	mu    sync.Mutex
	lines []string
	subs  []chan string
}

// Start runs bin with args; stdout lines are kept (see Lines), stdout and
// stderr both go to a log file in the test's temp dir. The process is
// killed when the test ends if it is still running.
func Start(t testing.TB, name, bin string, args ...string) *Proc {
	t.Helper()
	return StartIn(t, name, "", nil, bin, args...)
}

// StartEnv is Start with env (KEY=VALUE) added to the test's environment.
func StartEnv(t testing.TB, name, bin string, env []string, args ...string) *Proc {
	t.Helper()
	if env != nil {
		env = append(os.Environ(), env...)
	}
	return StartIn(t, name, "", env, bin, args...)
}

// StartIn is Start in working directory dir ("": the test's) with exactly
// the environment env (nil: the test's own).
func StartIn(t testing.TB, name, dir string, env []string, bin string, args ...string) *Proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Env = dir, env
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &Proc{Name: name, Cmd: cmd, LogPath: logPath, done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, line)
			p.mu.Lock()
			p.lines = append(p.lines, line)
			for _, s := range p.subs {
				select {
				case s <- line:
				default:
				}
			}
			p.mu.Unlock()
		}
		p.waitErr = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Stop(5 * time.Second)
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("--- %s log (last 4 KB) ---\n%s", name, tail(b, 4096))
			}
		}
	})
	return p
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// PID returns the process id.
func (p *Proc) PID() int { return p.Cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// ExitCode is the exit code once Done is closed (-1 if killed by a signal).
func (p *Proc) ExitCode() int { return p.Cmd.ProcessState.ExitCode() }

// Stop sends SIGTERM, waits up to grace, then SIGKILLs and waits.
func (p *Proc) Stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.Cmd.Process.Kill()
		<-p.done
	}
}

// Kill sends SIGKILL and waits for the process to be gone.
func (p *Proc) Kill() {
	_ = p.Cmd.Process.Kill()
	<-p.done
}

// Lines returns the stdout lines so far.
func (p *Proc) Lines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// Log returns the process's log so far.
func (p *Proc) Log() string {
	b, _ := os.ReadFile(p.LogPath)
	return string(b)
}

// WaitReady polls url until it answers 200, or fails the test at deadline.
func WaitReady(t testing.TB, url string, deadline time.Duration) {
	t.Helper()
	testwait.For(t, deadline, func() error {
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("%s: %d %s", url, resp.StatusCode, strings.TrimSpace(string(b)))
		}
		return nil
	})
}

// GetJSON decodes the JSON answer of url into v.
func GetJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: %d %s", url, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// PortFree reports whether a TCP port on 127.0.0.1 can be bound.
func PortFree(port int) bool {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
