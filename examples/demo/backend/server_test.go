package main

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// running is a backend served in-process on a loopback port.
type running struct {
	addr   string
	stop   context.CancelFunc
	served chan error
}

// start serves b on a free loopback port until the test ends or stop is called.
func start(t *testing.T, b *backend, grace time.Duration) *running {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{addr: lis.Addr().String(), stop: cancel, served: make(chan error, 1)}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := newServer(b, false, log)
	if err != nil {
		t.Fatal(err)
	}
	go func() { r.served <- serve(ctx, lis, srv, b, grace, log) }()
	t.Cleanup(func() {
		cancel()
		<-r.served
	})
	return r
}

func dial(t *testing.T, addr string) healthpb.HealthClient {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// check makes one health call and returns the backend it names and the call's error.
func check(ctx context.Context, c healthpb.HealthClient) (string, *healthpb.HealthCheckResponse, error) {
	var md metadata.MD
	resp, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md))
	name := ""
	if v := md.Get(backendHeader); len(v) > 0 {
		name = v[0]
	}
	return name, resp, err
}

func TestEveryCallNamesTheBackend(t *testing.T) {
	r := start(t, &backend{name: "echo-v2", roll: rand.Float64}, time.Second)
	c := dial(t, r.addr)
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		name, resp, err := check(ctx, c)
		cancel()
		if err != nil {
			t.Fatalf("check: %v", err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health status %v, want SERVING", resp.GetStatus())
		}
		if name != "echo-v2" {
			t.Errorf("%s header %q, want echo-v2", backendHeader, name)
		}
	}
}

func TestFailRate(t *testing.T) {
	const calls = 400
	for _, tc := range []struct {
		rate     float64
		min, max int // bounds on failed calls: each tail is far beyond six standard deviations
	}{
		{rate: 0, min: 0, max: 0},
		{rate: 0.3, min: 60, max: 180},
		{rate: 1, min: calls, max: calls},
	} {
		r := start(t, &backend{name: "echo-v1", failRate: tc.rate, roll: rand.Float64}, time.Second)
		c := dial(t, r.addr)
		failed := 0
		for range calls {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			name, _, err := check(ctx, c)
			cancel()
			switch status.Code(err) {
			case codes.OK:
			case codes.Unavailable:
				failed++
			default:
				t.Fatalf("fail rate %v: unexpected error %v", tc.rate, err)
			}
			if name != "echo-v1" {
				t.Fatalf("fail rate %v: %s header %q on a call that returned %v", tc.rate, backendHeader, name, err)
			}
		}
		if failed < tc.min || failed > tc.max {
			t.Errorf("fail rate %v: %d of %d calls failed, want between %d and %d", tc.rate, failed, calls, tc.min, tc.max)
		}
	}
}

func TestDelayHoldsEachCall(t *testing.T) {
	const delay = 200 * time.Millisecond
	r := start(t, &backend{name: "echo-v1", delay: delay, roll: rand.Float64}, time.Second)
	c := dial(t, r.addr)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	_, _, err := check(ctx, c)
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("call with a deadline shorter than the delay: %v, want DeadlineExceeded", err)
	}

	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	begin := time.Now()
	if _, _, err := check(ctx, c); err != nil {
		t.Fatalf("check: %v", err)
	}
	if took := time.Since(begin); took < delay {
		t.Errorf("call answered after %v, before the %v delay", took, delay)
	}
}

// entered is a roll function that never fails a call and reports each call's arrival.
type entered struct {
	once sync.Once
	ch   chan struct{}
}

func newEntered() *entered { return &entered{ch: make(chan struct{})} }

func (e *entered) roll() float64 {
	e.once.Do(func() { close(e.ch) })
	return 1
}

func TestShutdownLetsInFlightCallsFinish(t *testing.T) {
	in := newEntered()
	r := start(t, &backend{name: "echo-v1", failRate: 0.5, delay: 300 * time.Millisecond, roll: in.roll}, 10*time.Second)
	c := dial(t, r.addr)

	result := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _, err := check(ctx, c)
		result <- err
	}()
	<-in.ch
	r.stop()
	if err := <-result; err != nil {
		t.Errorf("call in flight at shutdown: %v, want it answered", err)
	}
	if err := <-r.served; err != nil {
		t.Errorf("serve returned %v after shutdown, want nil", err)
	}
	r.served <- nil // for the cleanup

	if conn, err := net.DialTimeout("tcp", r.addr, time.Second); err == nil {
		conn.Close()
		t.Errorf("%s still accepts connections after shutdown", r.addr)
	}
}

func TestShutdownCutsCallsAfterGrace(t *testing.T) {
	in := newEntered()
	r := start(t, &backend{name: "echo-v1", failRate: 0.5, delay: time.Minute, roll: in.roll}, 50*time.Millisecond)
	c := dial(t, r.addr)

	result := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_, _, err := check(ctx, c)
		result <- err
	}()
	<-in.ch
	r.stop()
	// Serve must come back long before the minute-long call would have been answered.
	select {
	case err := <-r.served:
		if err != nil {
			t.Errorf("serve returned %v, want nil", err)
		}
		r.served <- nil
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not return after the grace period")
	}
	if code := status.Code(<-result); code != codes.Unavailable {
		t.Errorf("call cut at shutdown ended with %v, want Unavailable", code)
	}
}

// TestXDSServerNeedsBootstrap: with --xds and no bootstrap the backend does not start, and
// says which variable it lacks. (e2e/node serves it, injected, with mTLS.)
func TestXDSServerNeedsBootstrap(t *testing.T) {
	t.Setenv("GRPC_XDS_BOOTSTRAP", "")
	t.Setenv("GRPC_XDS_BOOTSTRAP_CONFIG", "")
	_, err := newServer(&backend{name: "x"}, true, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "GRPC_XDS_BOOTSTRAP") {
		t.Errorf("newServer with --xds and no bootstrap: %v; want an error naming GRPC_XDS_BOOTSTRAP", err)
	}
}
