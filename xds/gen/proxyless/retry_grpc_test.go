package proxyless_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/navemesh/nave/xds/gen"
	"github.com/navemesh/nave/xds/gen/gentest"
)

// TestGRPCRetries: a real grpc-go client retries as the generated route
// says — on the gRPC status names of retryOn, as many times as attempts,
// with the route's backoff (which grpc-go jitters from zero, so the wait
// is not asserted) — and not on conditions it does not know (reported at
// generation).
func TestGRPCRetries(t *testing.T) {
	const host = "flaky.demo.svc.cluster.local"
	// The backend fails every call with UNAVAILABLE until failLeft
	// reaches zero, and counts the calls that arrive.
	var mu sync.Mutex
	failLeft := 0
	arrivals := 0
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		arrivals++
		if failLeft > 0 {
			failLeft--
			return nil, status.Error(codes.Unavailable, "flaky")
		}
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	h, p, _ := net.SplitHostPort(lis.Addr().String())

	for _, tc := range []struct {
		name     string
		retries  string
		fails    int
		want     codes.Code
		attempts int
	}{
		{"retries on unavailable", "{attempts: 3, retryOn: unavailable, backoff: 20ms}", 2, codes.OK, 3},
		{"more failures than retries", "{attempts: 1, retryOn: unavailable}", 2, codes.Unavailable, 2},
		{"not on another status", "{attempts: 3, retryOn: internal}", 1, codes.Unavailable, 1},
		{"HTTP conditions only: no retries", "{attempts: 3, retryOn: 5xx}", 1, codes.Unavailable, 1},
		{"attempts 0: no retries", "{attempts: 0}", 1, codes.Unavailable, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := gen.GRPC(gentest.Snapshot(t, map[string]string{"c1": `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: flaky, namespace: demo}
spec:
  hosts: [` + host + `]
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  endpoints: [{address: ` + h + `, ports: {grpc: ` + p + `}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: flaky, namespace: demo}
spec:
  hosts: [` + host + `]
  http: [{route: [{destination: {host: ` + host + `}}], retries: ` + tc.retries + `}]
`}))
			client := healthpb.NewHealthClient(grpcClient(t, out, "xds:///"+host+":7070"))
			// Wait for the channel to be ready with a call that succeeds.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			failLeft, arrivals = tc.fails, 0
			mu.Unlock()
			_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
			if got := status.Code(err); got != tc.want {
				t.Errorf("call: %v, want %s", err, tc.want)
			}
			mu.Lock()
			defer mu.Unlock()
			if arrivals != tc.attempts {
				t.Errorf("%d attempts reached the backend, want %d", arrivals, tc.attempts)
			}
		})
	}
}
