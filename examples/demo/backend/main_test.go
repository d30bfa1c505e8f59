package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
	"time"
)

// asMain makes a re-executed test binary behave as nave-demo-backend itself.
const asMain = "NAVE_DEMO_BACKEND_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMain) == "1" {
		os.Exit(run(os.Args[1:], os.Stderr))
	}
	os.Exit(m.Run())
}

// command returns this test binary set up to run as nave-demo-backend with args.
func command(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), asMain+"=1")
	return cmd
}

var addrInLog = regexp.MustCompile(`msg="backend serving" name=echo-v9 addr=(\S+)`)

func TestProcessServesAndExitsCleanlyOnSIGTERM(t *testing.T) {
	cmd := command(t, "--listen", "127.0.0.1:0", "--name", "echo-v9")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stderr)
	if !lines.Scan() {
		cmd.Process.Kill()
		t.Fatalf("no start line on stderr: %v", cmd.Wait())
	}
	first := lines.Text()
	var waitErr error
	exited := make(chan struct{})
	go func() {
		for lines.Scan() {
		}
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill() // a no-op once it has exited
		<-exited
	})

	m := addrInLog.FindStringSubmatch(first)
	if m == nil {
		t.Fatalf("start line %q does not name the backend and its address", first)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	name, _, err := check(ctx, dial(t, m[1]))
	if err != nil || name != "echo-v9" {
		t.Fatalf("check against the process: backend %q, err %v; want echo-v9", name, err)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Errorf("exit after SIGTERM: %v, want status 0", waitErr)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("process still running 20s after SIGTERM")
	}
}

func TestBadFlagsExitWithUsageError(t *testing.T) {
	for _, args := range [][]string{
		{"--fail-rate", "1.5"},
		{"--name", ""},
		{"--no-such-flag"},
		{"extra"},
	} {
		out, err := command(t, args...).CombinedOutput()
		exit, ok := err.(*exec.ExitError)
		if !ok || exit.ExitCode() != 2 {
			t.Errorf("args %q: %v (output %q), want exit status 2", args, err, out)
		}
	}
}
