package e2e

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/navemesh/nave/internal/testwait"
)

// testBackend is an in-test gRPC backend whose behaviour per call is
// decided by answer, given the call's 1-based count among the calls with
// the same x-case header (so clients do not disturb each other's pattern)
// and whether the call is a retry (grpc-go sends grpc-previous-rpc-attempts
// on retries).
type testBackend struct {
	*backend
	calls   atomic.Int64
	mu      sync.Mutex
	perCase map[string]int64
}

func startTestBackend(t *testing.T, name string, answer func(n int64, retry bool) (time.Duration, error)) *testBackend {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tb := &testBackend{perCase: map[string]int64{}}
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		tb.calls.Add(1)
		tb.mu.Lock()
		c := strings.Join(md.Get("x-case"), ",")
		tb.perCase[c]++
		n := tb.perCase[c]
		tb.mu.Unlock()
		delay, err := answer(n, len(md.Get("grpc-previous-rpc-attempts")) > 0)
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if err != nil {
			// No response headers on failure: a client that received
			// headers has committed the RPC and would not retry it (gRFC A6).
			return nil, err
		}
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-nave-backend", name))
		return handler(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	tb.backend = &backend{name: name, port: lis.Addr().(*net.TCPAddr).Port, srv: srv}
	return tb
}

// waitCode waits until the client made a call that ended with code, and
// returns when.
func waitCode(t *testing.T, c *client, code string, deadline time.Duration) time.Time {
	t.Helper()
	var at time.Time
	testwait.For(t, deadline, func() error {
		for _, cl := range c.calls() {
			if cl.Code == code {
				at = cl.Time
				return nil
			}
		}
		return fmt.Errorf("no %s call yet (%s)", code, describe(tally(c.calls())))
	})
	return at
}

// TestProxylessResilience checks that what the hub generates from a
// VirtualService's retries, timeout and fault injection is what a real
// grpc-go xDS client does: each case is a header-matched route.
func TestProxylessResilience(t *testing.T) {
	// flaky fails every other first attempt (never a retry); slow answers
	// after a second.
	flaky := startTestBackend(t, "echo-flaky", func(n int64, retry bool) (time.Duration, error) {
		if n%2 == 1 && !retry {
			return 0, status.Error(codes.Unavailable, "flaky backend fails every other call")
		}
		return 0, nil
	})
	slow := startTestBackend(t, "slow", func(int64, bool) (time.Duration, error) { return time.Second, nil })
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "mesh.yaml"), fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: demo}
spec:
  hosts: [%[1]s]
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  endpoints: [{address: 127.0.0.1, ports: {grpc: %[2]d}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: demo}
spec:
  hosts: [%[1]s]
  http:
  - name: retried
    match: [{headers: {x-case: {exact: retry}}}]
    route: [{destination: {host: %[1]s}}]
    retries: {attempts: 4, retryOn: unavailable}
  - name: not-retried
    match: [{headers: {x-case: {exact: noretry}}}]
    route: [{destination: {host: %[1]s}}]
    retries: {attempts: 0}
  - name: aborted
    match: [{headers: {x-case: {exact: abort}}}]
    route: [{destination: {host: %[1]s}}]
    fault: {abort: {grpcStatus: PERMISSION_DENIED, percentage: {value: 100}}}
  - name: delayed
    match: [{headers: {x-case: {exact: delay}}}]
    route: [{destination: {host: %[1]s}}]
    fault: {delay: {fixedDelay: 1s, percentage: {value: 100}}}
  - name: default
    route: [{destination: {host: %[1]s}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: slow, namespace: demo}
spec:
  hosts: [%[3]s]
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  endpoints: [{address: 127.0.0.1, ports: {grpc: %[4]d}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: slow, namespace: demo}
spec:
  hosts: [%[3]s]
  http:
  - route: [{destination: {host: %[3]s}}]
    timeout: 200ms
`, echoHost, flaky.port, slowHost, slow.port))
	h := newHub(t)
	newSpoke(t, h, "cluster-a", dir)
	target := "xds:///" + echoHost + ":7070"
	retry := startClient(t, h, target, "retry.demo", "--header", "x-case=retry")
	noRetry := startClient(t, h, target, "noretry.demo", "--header", "x-case=noretry")
	abort := startClient(t, h, target, "abort.demo", "--header", "x-case=abort")
	// The client's own deadline (500ms) is shorter than the injected delay.
	delay := startClient(t, h, target, "delay.demo", "--header", "x-case=delay", "--interval", "50ms", "--timeout", "500ms")
	// The backend takes 1s, the route allows 200ms, the client 2s.
	timeout := startClient(t, h, "xds:///"+slowHost+":7070", "timeout.demo", "--interval", "50ms")

	t.Run("retries hide a flaky backend", func(t *testing.T) {
		got := tally(retry.collect(t, firstOK(t, retry, 30*time.Second), 200, 30*time.Second))
		if got["echo-flaky"] != 200 {
			t.Fatalf("with retries {attempts: 4, retryOn: unavailable}: %s, want every call OK", describe(got))
		}
	})
	t.Run("without retries the failures show", func(t *testing.T) {
		got := tally(noRetry.collect(t, firstOK(t, noRetry, 30*time.Second), 200, 30*time.Second))
		// Every other first attempt fails: about half.
		if got["error:Unavailable"] < 80 || got["echo-flaky"] < 80 {
			t.Fatalf("with retries {attempts: 0}: %s, want both failures and successes", describe(got))
		}
		t.Logf("without retries: %s", describe(got))
	})
	t.Run("fault abort", func(t *testing.T) {
		since := waitCode(t, abort, "PermissionDenied", 30*time.Second)
		got := tally(abort.collect(t, since, 100, 30*time.Second))
		if got["error:PermissionDenied"] != 100 {
			t.Fatalf("abort grpcStatus PERMISSION_DENIED at 100%%: %s, want every call aborted", describe(got))
		}
	})
	t.Run("fault delay", func(t *testing.T) {
		since := waitCode(t, delay, "DeadlineExceeded", 30*time.Second)
		got := tally(delay.collect(t, since, 10, 30*time.Second))
		if got["error:DeadlineExceeded"] != 10 {
			t.Fatalf("delay 1s, client deadline 500ms: %s, want every call past its deadline", describe(got))
		}
	})
	t.Run("route timeout", func(t *testing.T) {
		since := waitCode(t, timeout, "DeadlineExceeded", 30*time.Second)
		got := tally(timeout.collect(t, since, 10, 30*time.Second))
		if got["error:DeadlineExceeded"] != 10 {
			t.Fatalf("backend takes 1s, route timeout 200ms, client deadline 2s: %s, want every call cut by the route timeout", describe(got))
		}
		if n := slow.calls.Load(); n == 0 {
			t.Fatal("no call reached the slow backend")
		}
	})
}

// Note: a fault delay is not bounded by the route timeout, in grpc-go as in
// Envoy — the fault filter runs before the router starts the route's timer.

const slowHost = "slow.demo.svc.cluster.local"
