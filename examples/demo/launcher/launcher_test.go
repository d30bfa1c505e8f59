package main

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/navemesh/nave/internal/freeport"
	"github.com/navemesh/nave/internal/testlog"
	"github.com/navemesh/nave/internal/testwait"
)

// lockedBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type lockedBuffer = testlog.Buffer

// demo is a launcher process started by a test, with stub children.
type demo struct {
	cmd     *exec.Cmd
	out     *lockedBuffer // stdout and stderr
	stubs   string        // where the stubs record themselves
	config  string
	work    string
	hubXDS  string
	exited  chan struct{}
	waitErr error
}

// freeAddr is a loopback address for a process to listen on: below the
// ephemeral range, so no outgoing connection takes it meanwhile
// (internal/freeport).
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// startDemo starts the launcher with every demo binary stubbed by this test binary, on
// free ports. env adds to its environment (and so its children's); args add flags.
func startDemo(t *testing.T, env []string, args ...string) *demo {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	for _, name := range stubNames {
		if err := os.Symlink(exe, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	d := &demo{out: &lockedBuffer{}, stubs: t.TempDir(), config: t.TempDir(), work: filepath.Join(t.TempDir(), "work"),
		hubXDS: freeAddr(t), exited: make(chan struct{})}
	if err := os.WriteFile(filepath.Join(d.config, "echo-routing.yaml"), []byte("# routes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// What a last run left: the launcher must start afresh.
	if err := os.MkdirAll(filepath.Join(d.work, "hub-state"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"hub-state/stale", "join-token"} {
		if err := os.WriteFile(filepath.Join(d.work, f), []byte("last run\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d.cmd = exec.Command(exe, append([]string{
		"--bin", bin, "--config", d.config, "--work", d.work,
		"--hub-admin", freeAddr(t), "--hub-spokes", freeAddr(t), "--hub-xds", d.hubXDS, "--spoke-admin", freeAddr(t),
	}, args...)...)
	d.cmd.Env = append(append(os.Environ(), asMain+"=1", stubDirEnv+"="+d.stubs), env...)
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	// The client shares the launcher's output pipe; should it outlive the launcher, Wait
	// must not wait for it to close the pipe.
	d.cmd.WaitDelay = 5 * time.Second
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		d.waitErr = d.cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() {
		d.cmd.Process.Kill() // a no-op once it has exited
		// Children of a killed launcher die by Pdeathsig; make sure none outlives the test
		// even when that fails.
		for pid := range d.records(t) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		<-d.exited
	})
	return d
}

// records returns what each stub recorded: pid to binary name and arguments.
func (d *demo) records(t *testing.T) map[int][]string {
	t.Helper()
	entries, err := os.ReadDir(d.stubs)
	if err != nil {
		t.Fatal(err)
	}
	recs := map[int][]string{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue // a record being written
		}
		b, err := os.ReadFile(filepath.Join(d.stubs, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		recs[pid] = strings.Split(string(b), "\n")
	}
	return recs
}

// navectlRuns returns the arguments of each navectl run, by command ("token create",
// "ca-hash", "cert issue").
func (d *demo) navectlRuns(t *testing.T) map[string][][]string {
	t.Helper()
	entries, err := os.ReadDir(d.stubs)
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string][][]string{}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "navectl-") || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(d.stubs, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		args := strings.Split(string(b), "\n")
		cmd := args[0]
		if cmd != "ca-hash" && len(args) > 1 {
			cmd += " " + args[1]
		}
		runs[cmd] = append(runs[cmd], args)
	}
	return runs
}

// waitRecords waits until n stubs have recorded themselves.
func (d *demo) waitRecords(t *testing.T, n int) map[int][]string {
	t.Helper()
	var recs map[int][]string
	testwait.For(t, 30*time.Second, func() error {
		if recs = d.records(t); len(recs) >= n {
			return nil
		}
		select {
		case <-d.exited:
			t.Fatalf("launcher exited (%v) with %d of %d children started; output:\n%s", d.waitErr, len(recs), n, d.out.String())
		default:
		}
		return fmt.Errorf("%d of %d children started; launcher output:\n%s", len(recs), n, d.out.String())
	})
	return recs
}

// waitOutput waits until ok holds for the launcher's output.
func (d *demo) waitOutput(t *testing.T, ok func(string) bool) {
	t.Helper()
	testwait.For(t, 30*time.Second, func() error {
		if out := d.out.String(); !ok(out) {
			return fmt.Errorf("launcher output not as expected:\n%s", out)
		}
		return nil
	})
}

// wait waits for the launcher to exit and returns its exit code.
func (d *demo) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-d.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("launcher still running after 60s; output:\n%s", d.out.String())
	}
	var exit *exec.ExitError
	if errors.As(d.waitErr, &exit) {
		return exit.ExitCode()
	}
	if d.waitErr != nil {
		t.Fatal(d.waitErr)
	}
	return 0
}

// alive reports whether pid is a running process. A zombie, dead but not yet reaped by
// whoever inherited it, counts as dead.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may hold spaces.
	rest := string(stat[bytes.LastIndexByte(stat, ')')+1:])
	return !strings.HasPrefix(strings.TrimSpace(rest), "Z")
}

var startedLine = regexp.MustCompile(`nave-demo: started (\S+)\s+pid (\d+)`)

// started returns the children the launcher says it started: pid to name.
func (d *demo) started(t *testing.T) map[int]string {
	t.Helper()
	pids := map[int]string{}
	for _, m := range startedLine.FindAllStringSubmatch(d.out.String(), -1) {
		pid, err := strconv.Atoi(m[2])
		if err != nil {
			t.Fatal(err)
		}
		pids[pid] = m[1]
	}
	return pids
}

// assertAllGone fails the test for every child still alive, whether the launcher named
// it or the stub recorded itself.
func (d *demo) assertAllGone(t *testing.T) {
	t.Helper()
	pids := d.started(t)
	for pid, rec := range d.records(t) {
		pids[pid] = rec[0]
	}
	for pid, name := range pids {
		if alive(pid) {
			t.Errorf("%s (pid %d) is still running", name, pid)
		}
	}
}

// byName groups the records by binary name.
func byName(recs map[int][]string) map[string][][]string {
	m := map[string][][]string{}
	for _, rec := range recs {
		m[rec[0]] = append(m[rec[0]], rec[1:])
	}
	return m
}

func hasArgs(args []string, pairs ...string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		j := slices.Index(args, pairs[i])
		if j < 0 || j+1 >= len(args) || args[j+1] != pairs[i+1] {
			return false
		}
	}
	return true
}

func TestSIGTERMStopsEveryChild(t *testing.T) {
	d := startDemo(t, nil, "--", "--header", "x-user=beta")
	recs := d.waitRecords(t, 6)
	d.waitOutput(t, func(out string) bool {
		return len(d.started(t)) == 6 && strings.Contains(out, "stub nave-demo-client running")
	})

	if started := d.started(t); len(started) != 6 {
		t.Errorf("launcher reports %d children started, want 6: %v", len(started), started)
	} else {
		for pid := range recs {
			if started[pid] == "" {
				t.Errorf("stub pid %d is not among the children the launcher reports: %v", pid, started)
			}
		}
	}
	names := byName(recs)
	if len(names["nave-hub"]) != 1 || len(names["nave-spoke"]) != 1 || len(names["nave-demo-backend"]) != 3 || len(names["nave-demo-client"]) != 1 {
		t.Fatalf("started %v, want one hub, one spoke, three backends, one client", names)
	}
	config, err := filepath.Abs(d.config)
	if err != nil {
		t.Fatal(err)
	}
	hubState := filepath.Join(d.work, "hub-state")
	if hub := names["nave-hub"][0]; !hasArgs(hub, "--state.dir", hubState, "--ca.meshes", "default=cluster.local") || slices.Contains(hub, "--tls.plaintext") {
		t.Errorf("hub arguments %q", hub)
	}
	tokenFile := filepath.Join(d.work, "join-token")
	if spoke := names["nave-spoke"][0]; !hasArgs(spoke, "--source", "fs://"+config, "--cluster", "demo-cluster", "--mesh", "default",
		"--hub.token-file", tokenFile, "--hub.ca-hash", stubPin, "--hub.state-dir", filepath.Join(d.work, "spoke-state")) ||
		slices.Contains(spoke, "--hub.plaintext") {
		t.Errorf("spoke arguments %q", spoke)
	}

	// The secure flow: one navectl run of each step, on the hub's state dir; the token
	// in a file only the user can read; nothing left of the last run.
	hubCA := filepath.Join(hubState, "serving-ca", "hub", "root-cert.pem")
	certs := filepath.Join(d.work, "client-certs")
	runs := d.navectlRuns(t)
	if len(runs) != 3 || len(runs["token create"]) != 1 || len(runs["ca-hash"]) != 1 || len(runs["cert issue"]) != 1 {
		t.Fatalf("navectl runs %q, want token create, ca-hash and cert issue once each", runs)
	}
	if r := runs["token create"][0]; !hasArgs(r, "--state-dir", hubState, "--mesh", "default", "--cluster", "demo-cluster") {
		t.Errorf("navectl %q", r)
	}
	if r := runs["ca-hash"][0]; !slices.Equal(r, []string{"ca-hash", hubCA}) {
		t.Errorf("navectl %q, want ca-hash %s", r, hubCA)
	}
	if r := runs["cert issue"][0]; !hasArgs(r, "--state-dir", hubState, "--mesh", "default", "--trust-domain", "cluster.local",
		"--namespace", "demo", "--service-account", "demo-client", "--out", certs) {
		t.Errorf("navectl %q", r)
	}
	if b, err := os.ReadFile(tokenFile); err != nil || string(b) != stubToken+"\n" {
		t.Errorf("join token file %q (err %v), want navectl's token", b, err)
	}
	if st, err := os.Stat(tokenFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("join token file mode %v (err %v), want 0600", st.Mode().Perm(), err)
	}
	if _, err := os.Stat(filepath.Join(hubState, "stale")); !os.IsNotExist(err) {
		t.Errorf("the last run's hub state is still there (err %v)", err)
	}
	var listens []string
	for _, args := range names["nave-demo-backend"] {
		i := slices.Index(args, "--listen")
		listens = append(listens, args[i+1]+" "+args[i+3])
	}
	slices.Sort(listens)
	if want := []string{"127.0.0.1:17071 echo-v1", "127.0.0.1:17072 echo-v2", "127.0.0.1:17073 echo-v3"}; !slices.Equal(listens, want) {
		t.Errorf("backends listen on %q, want %q", listens, want)
	}
	if client := names["nave-demo-client"][0]; !hasArgs(client, "--hub", d.hubXDS, "--node-id", "demo-client.demo", "--header", "x-user=beta",
		"--namespace", "demo", "--xds-cert-dir", certs, "--xds-ca-file", hubCA) {
		t.Errorf("client arguments %q", client)
	}

	// Output: the log paths, the banner, and the client's own output on the terminal.
	hubLog := filepath.Join(d.work, "hub.log")
	out := d.out.String()
	for _, want := range []string{hubLog, filepath.Join(d.work, "echo-v3.log"), "Ctrl-C stops everything", "echo-routing.yaml", "stub nave-demo-client running",
		tokenFile, stubPin, stubIssued, "mTLS"} {
		if !strings.Contains(out, want) {
			t.Errorf("launcher output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "stub-secret") {
		t.Errorf("launcher output shows the join token:\n%s", out)
	}
	if b, err := os.ReadFile(hubLog); err != nil || !strings.Contains(string(b), "stub nave-hub running") {
		t.Errorf("hub log %q (err %v), want the hub's output", b, err)
	}

	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := d.wait(t); code != 0 {
		t.Errorf("launcher exit status %d after SIGTERM, want 0; output:\n%s", code, d.out.String())
	}
	d.assertAllGone(t)
	if b, err := os.ReadFile(hubLog); err != nil || !strings.Contains(string(b), "stub nave-hub stopping") {
		t.Errorf("hub log %q (err %v), want the hub to have stopped on SIGTERM", b, err)
	}
}

func TestPlaintextRunsNoNavectl(t *testing.T) {
	d := startDemo(t, nil, "--plaintext")
	recs := d.waitRecords(t, 6)
	d.waitOutput(t, func(out string) bool { return strings.Contains(out, "stub nave-demo-client running") })
	names := byName(recs)
	if hub := names["nave-hub"][0]; !slices.Contains(hub, "--tls.plaintext") {
		t.Errorf("hub arguments %q, want --tls.plaintext", hub)
	}
	if spoke := names["nave-spoke"][0]; !slices.Contains(spoke, "--hub.plaintext") || slices.Contains(spoke, "--hub.token-file") {
		t.Errorf("spoke arguments %q, want --hub.plaintext and no token", spoke)
	}
	if client := names["nave-demo-client"][0]; slices.Contains(client, "--xds-cert-dir") {
		t.Errorf("client arguments %q, want no certificate", client)
	}
	if runs := d.navectlRuns(t); len(runs) != 0 {
		t.Errorf("navectl ran in plaintext: %q", runs)
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := d.wait(t); code != 0 {
		t.Errorf("launcher exit status %d after SIGTERM, want 0; output:\n%s", code, d.out.String())
	}
	d.assertAllGone(t)
}

func TestNavectlFailureStopsEverything(t *testing.T) {
	d := startDemo(t, []string{stubNavectlFailEnv + "=ca-hash"})
	if code := d.wait(t); code != 1 {
		t.Errorf("launcher exit status %d, want 1", code)
	}
	out := d.out.String()
	if !strings.Contains(out, "navectl ca-hash: exit status 1: stub navectl: ca-hash refused") {
		t.Errorf("output does not name the failed step and why:\n%s", out)
	}
	if started := d.started(t); len(started) != 4 || slices.Contains(slices.Collect(maps.Values(started)), "spoke") {
		t.Errorf("launcher started %v, want the hub and the backends only", started)
	}
	d.assertAllGone(t)
}

func TestChildIgnoringSIGTERMIsKilledAfterGrace(t *testing.T) {
	d := startDemo(t, []string{stubIgnoreTermEnv + "=nave-demo-backend"}, "--grace", "300ms")
	d.waitRecords(t, 6)
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := d.wait(t); code != 0 {
		t.Errorf("launcher exit status %d, want 0; output:\n%s", code, d.out.String())
	}
	d.assertAllGone(t)
	if out := d.out.String(); !strings.Contains(out, "echo-v1 (pid") || !strings.Contains(out, "killing it") {
		t.Errorf("output does not report the backends it had to kill:\n%s", out)
	}
}

func TestUnexpectedExitStopsEverything(t *testing.T) {
	for _, tc := range []struct {
		binary, name, where string
		children            int
	}{
		{binary: "nave-spoke", name: "spoke", where: "spoke.log", children: 5},
		{binary: "nave-demo-client", name: "client", where: "its output is above", children: 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := startDemo(t, []string{stubExitEnv + "=" + tc.binary})
			if code := d.wait(t); code != 1 {
				t.Errorf("launcher exit status %d, want 1", code)
			}
			out := d.out.String()
			if !strings.Contains(out, tc.name+" (pid") || !strings.Contains(out, "exited unexpectedly (exit status 3)") || !strings.Contains(out, tc.where) {
				t.Errorf("output does not name %s, its exit status and %q:\n%s", tc.name, tc.where, out)
			}
			if n := len(d.started(t)); n != tc.children {
				t.Errorf("launcher started %d children, want %d:\n%s", n, tc.children, out)
			}
			d.assertAllGone(t)
		})
	}
}

func TestReadinessTimeoutNamesWhatIsNotReady(t *testing.T) {
	d := startDemo(t, []string{stubNotReadyEnv + "=nave-spoke"}, "--ready-timeout", "1s")
	if code := d.wait(t); code != 1 {
		t.Errorf("launcher exit status %d, want 1", code)
	}
	out := d.out.String()
	if !strings.Contains(out, "not ready after 1s: spoke (GET http://") || !strings.Contains(out, "503") || !strings.Contains(out, "spoke.log") {
		t.Errorf("output does not say the spoke was not ready, why, and where its log is:\n%s", out)
	}
	if strings.Contains(out, "hub (GET") {
		t.Errorf("output names the hub, which was ready:\n%s", out)
	}
	if strings.Contains(out, "nave-demo-client running") {
		t.Errorf("client started although the spoke never became ready:\n%s", out)
	}
	d.assertAllGone(t)
}

func TestKilledLauncherTakesChildrenAlong(t *testing.T) {
	d := startDemo(t, nil)
	recs := d.waitRecords(t, 6)
	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	d.wait(t)
	testwait.For(t, 10*time.Second, func() error {
		var outlived []string
		for pid, rec := range recs {
			if alive(pid) {
				outlived = append(outlived, fmt.Sprintf("%s (pid %d)", rec[0], pid))
			}
		}
		if len(outlived) > 0 {
			return fmt.Errorf("%s outlived the SIGKILLed launcher", strings.Join(outlived, ", "))
		}
		return nil
	})
}

func TestMissingBinaryIsNamed(t *testing.T) {
	var out bytes.Buffer
	code := run([]string{"--bin", t.TempDir(), "--config", t.TempDir(), "--work", t.TempDir()}, &out, &out)
	if code != 1 || !strings.Contains(out.String(), "nave-hub") || !strings.Contains(out.String(), "make build") {
		t.Errorf("exit %d, output %q; want 1 and a message naming nave-hub", code, out.String())
	}
}
