package load

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/navemesh/nave/internal/freeport"
)

// Hub is a running nave-hub process, however it was started.
type Hub struct {
	PID    int
	Admin  string // host:port of the admin HTTP server
	XDS    string // host:port of the ADS server
	Spokes string // host:port of the spoke sync service
}

// HubStarter starts a hub for one run (fresh processes each time) and
// returns it with a function that stops it (by PID, with a deadline): one
// hub, or the replicas of one set (StartReplicas).
type HubStarter func(ctx context.Context) ([]*Hub, func(), error)

// HubArgs are the flags that put a hub on the given loopback addresses,
// followed by extra. The load benchmark measures the push path, so its hub
// runs in plaintext mode (the tool's proxies and spokes claim their
// identities); TLS costs the handshake once per connection.
func HubArgs(admin, spokes, xds string, extra ...string) []string {
	return append([]string{"--admin.listen", admin, "--spokes.listen", spokes, "--xds.listen", xds, "--tls.plaintext"}, extra...)
}

// FreeAddr returns a loopback host:port that was free a moment ago, below
// the ephemeral range (internal/freeport): the processes started on it
// bind it after the fact.
func FreeAddr() (string, error) { return freeport.Addr() }

// HubProcess is a hub started by StartHub: its own process group, killed
// (the whole group) on Stop, and with SIGKILL if this process dies first.
type HubProcess struct {
	Hub
	cmd  *exec.Cmd
	done chan struct{}
	// state is the hub's state dir, removed by Stop ("": none of its own).
	state string
}

// StartHub runs bin (a nave-hub binary) on free loopback ports with extra
// flags, its output appended to logPath (or discarded if empty), and waits
// until it is ready. Callers must Stop it.
func StartHub(ctx context.Context, bin, logPath string, extra ...string) (*HubProcess, error) {
	h, err := freeHub()
	if err != nil {
		return nil, err
	}
	// A fresh state dir: a hub remembers the clusters that synced with it
	// (in plaintext mode too) and, restarted on the same state, would wait
	// for the previous run's.
	state, err := os.MkdirTemp("", "nave-load-hub-")
	if err != nil {
		return nil, err
	}
	p, err := startProcess(ctx, bin, logPath, HubArgs(h.Admin, h.Spokes, h.XDS, append([]string{"--state.dir", state}, extra...)...))
	if err != nil {
		os.RemoveAll(state)
		return nil, err
	}
	p.state = state
	return p, nil
}

// freeHub is a Hub (no process yet) on free loopback ports.
func freeHub() (*Hub, error) {
	var addrs [3]string
	for i := range addrs {
		a, err := FreeAddr()
		if err != nil {
			return nil, err
		}
		addrs[i] = a
	}
	return &Hub{Admin: addrs[0], Spokes: addrs[1], XDS: addrs[2]}, nil
}

// startProcess runs bin with args (which put its listeners where HubArgs
// says) and waits until it is ready.
func startProcess(ctx context.Context, bin, logPath string, args []string) (*HubProcess, error) {
	var addrs [3]string // admin, spokes, xds
	for i, flag := range []string{"--admin.listen", "--spokes.listen", "--xds.listen"} {
		for j := 0; j+1 < len(args); j++ {
			if args[j] == flag {
				addrs[i] = args[j+1]
			}
		}
	}
	out := io.Discard
	if logPath != "" {
		f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, err
		}
		defer f.Close() // the child has its own descriptor
		out = f
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	h := &HubProcess{Hub: Hub{PID: cmd.Process.Pid, Admin: addrs[0], Spokes: addrs[1], XDS: addrs[2]}, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(h.done)
	}()
	if err := h.WaitReady(ctx, 30*time.Second, h.done); err != nil {
		h.Stop(5 * time.Second)
		return nil, err
	}
	return h, nil
}

// Stop sends SIGTERM to the hub's process group, waits up to grace, then
// SIGKILLs the group and waits for the process.
func (h *HubProcess) Stop(grace time.Duration) {
	if h.state != "" {
		defer os.RemoveAll(h.state)
	}
	select {
	case <-h.done:
		return
	default:
	}
	_ = syscall.Kill(-h.PID, syscall.SIGTERM)
	select {
	case <-h.done:
	case <-time.After(grace):
		_ = syscall.Kill(-h.PID, syscall.SIGKILL)
		<-h.done
	}
}

// URL is an admin URL of the hub.
func (h *Hub) URL(path string) string { return "http://" + h.Admin + path }

// WaitReady polls /healthz/ready until it answers 200; exited (may be
// nil) ends the wait early when the process is gone.
func (h *Hub) WaitReady(ctx context.Context, deadline time.Duration, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	var last error
	for {
		resp, err := http.Get(h.URL("/healthz/ready"))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("hub not ready within %s: %v", deadline, last)
		case <-exited:
			return errors.New("the hub exited before it was ready")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// getJSON decodes the JSON answer of an admin path.
func (h *Hub) getJSON(path string, v any) error {
	resp, err := http.Get(h.URL(path))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: %s %s", path, resp.Status, strings.TrimSpace(string(b)))
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// Metrics scrapes the hub's /metrics: every nave_ sample (histogram
// buckets left out) by its series ("name{labels}"), and the Go runtime's
// allocation and collection counters (runtimeMetrics).
func (h *Hub) Metrics() (map[string]float64, error) {
	resp, err := http.Get(h.URL("/metrics"))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		if !strings.HasPrefix(line, "nave_") && (i < 0 || !slices.Contains(runtimeMetrics, line[:i])) {
			continue
		}
		if i < 0 {
			continue
		}
		series := line[:i]
		if name, _, _ := strings.Cut(series, "{"); strings.HasSuffix(name, "_bucket") {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[series] = v
	}
	return out, sc.Err()
}

// The Go runtime's counters Metrics reads besides nave_ series: bytes
// allocated and collections completed since the process started. Unlike
// CPU-seconds on shared cores they do not depend on what else runs.
const (
	allocBytesMetric = "go_memstats_alloc_bytes_total"
	gcCyclesMetric   = "go_gc_duration_seconds_count"
)

var runtimeMetrics = []string{allocBytesMetric, gcCyclesMetric}

// idleReleasesMetric counts the hub's returns of its idle heap to the OS
// (shared/memrelease).
const idleReleasesMetric = "nave_memory_idle_releases_total"

// sumMetric adds every series of a metric name.
func sumMetric(m map[string]float64, name string) float64 {
	sum := 0.0
	for series, v := range m {
		if n, _, _ := strings.Cut(series, "{"); n == name {
			sum += v
		}
	}
	return sum
}

// cpuSeconds reads a process's user+system CPU time from /proc/PID/stat
// (in USER_HZ, which Linux fixes at 100 per second for this interface).
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: fields count from the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	// f[0] is field 3 (state): utime is field 14, stime field 15.
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	return (ut + st) / 100, nil
}

// MemKB reads a "Vm...:" line of /proc/PID/status, in KiB.
func MemKB(pid int, key string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				break
			}
			return strconv.ParseInt(f[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, key)
}

// resetPeak resets the process's VmHWM to its current RSS (Linux
// clear_refs "5"), so VmHWM becomes the peak since now.
func resetPeak(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// selfCPU is this process's user+system CPU time.
func selfCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
