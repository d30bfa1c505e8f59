package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// asMain makes a re-executed test binary behave as nave-demo-client itself.
const asMain = "NAVE_DEMO_CLIENT_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMain) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// clientCommand returns this test binary set up to run as nave-demo-client with args.
func clientCommand(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), asMain+"=1")
	return cmd
}

// testBackend is a health server that names itself like nave-demo-backend does and
// remembers the x-user header of each call. Safe for concurrent use.
type testBackend struct {
	addr  string
	mu    sync.Mutex
	users []string
}

func startBackend(t *testing.T, name string) *testBackend {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &testBackend{addr: lis.Addr().String()}
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		b.mu.Lock()
		b.users = append(b.users, strings.Join(md.Get("x-user"), ","))
		b.mu.Unlock()
		if err := grpc.SetHeader(ctx, metadata.Pairs(backendHeader, name)); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return b
}

func (b *testBackend) seenUsers() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.users...)
}

// decodeLines parses the client's --json output.
func decodeLines(t *testing.T, out []byte) []callLine {
	t.Helper()
	var lines []callLine
	for line := range strings.Lines(string(out)) {
		var l callLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("output line %q: %v", line, err)
		}
		lines = append(lines, l)
	}
	return lines
}

func TestProcessCallsWithHeadersAndPrintsJSON(t *testing.T) {
	b := startBackend(t, "echo-v7")
	cmd := clientCommand(t, "--target", "passthrough:///"+b.addr, "--json", "--count", "5", "--interval", "10ms",
		"--timeout", "5s", "--header", "x-user=beta")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("client: %v, stderr %s", err, stderr.String())
	}
	lines := decodeLines(t, out)
	if len(lines) != 5 {
		t.Fatalf("%d output lines, want 5:\n%s", len(lines), out)
	}
	for i, l := range lines {
		if l.Seq != i+1 || l.Backend != "echo-v7" || l.Code != "OK" || l.Error != "" {
			t.Errorf("line %d: %+v, want seq %d answered OK by echo-v7", i, l, i+1)
		}
		if _, err := time.Parse(time.RFC3339Nano, l.Time); err != nil {
			t.Errorf("line %d: time %q: %v", i, l.Time, err)
		}
	}
	users := b.seenUsers()
	if len(users) != 5 || users[0] != "beta" || users[4] != "beta" {
		t.Errorf("backend saw x-user %q, want beta on each of 5 calls", users)
	}
}

func TestProcessSummarizesAndExitsZeroOnSIGTERM(t *testing.T) {
	b := startBackend(t, "echo-v1")
	cmd := clientCommand(t, "--target", "passthrough:///"+b.addr, "--interval", "10ms", "--report", "100ms", "--timeout", "5s")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{})
	lines := make(chan string, 100)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill() // a no-op once it has exited
		<-exited
	})

	select {
	case line := <-lines:
		if !strings.Contains(line, " ok=") || !strings.Contains(line, "echo-v1 100% ####################") {
			t.Errorf("summary %q, want every call answered by echo-v1", line)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no summary within 20s")
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
		t.Fatal("client still running 20s after SIGTERM")
	}
}

func TestProcessRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--header", "novalue"},
		{"--hub", "127.0.0.1:1"},
		{"--interval", "0s"},
		{"--target", "xds:///echo.demo.svc.cluster.local:7070"},
		{"--hub", "127.0.0.1:1", "--node-id", "n", "--xds-cert-dir", t.TempDir()},
		{"--xds-cert-dir", t.TempDir(), "--xds-ca-file", "ca.pem"},
		{"--hub", "127.0.0.1:1", "--node-id", "n", "--xds-cert-dir", t.TempDir(), "--xds-ca-file", "ca.pem"},
	} {
		cmd := clientCommand(t, args...)
		cmd.Env = append(cmd.Env, bootstrapFileEnv+"=", bootstrapContentEnv+"=")
		out, err := cmd.CombinedOutput()
		exit, ok := err.(*exec.ExitError)
		if !ok || exit.ExitCode() != 2 {
			t.Errorf("args %q: %v (output %q), want exit status 2", args, err, out)
		}
	}
}
