package xdstest

import (
	"context"
	"fmt"
	"maps"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// CountingBackends are gRPC health servers, one per name, each on its own
// loopback address (127.0.0.N), counting the calls each one serves.
type CountingBackends struct {
	Addr map[string]string       // name → host:port
	Srv  map[string]*grpc.Server // name → server (to stop one)

	mu   sync.Mutex
	hits map[string]int
}

// StartCountingBackends starts one backend per name; they stop with the
// test.
func StartCountingBackends(t testing.TB, names ...string) *CountingBackends {
	t.Helper()
	b := &CountingBackends{Addr: map[string]string{}, Srv: map[string]*grpc.Server{}, hits: map[string]int{}}
	for i, name := range names {
		lis, err := net.Listen("tcp", fmt.Sprintf("127.0.0.%d:0", i+1))
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			b.mu.Lock()
			b.hits[name]++
			b.mu.Unlock()
			return h(ctx, req)
		}))
		healthpb.RegisterHealthServer(srv, health.NewServer())
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(srv.Stop)
		b.Addr[name], b.Srv[name] = lis.Addr().String(), srv
	}
	return b
}

// Reset forgets the calls counted so far.
func (b *CountingBackends) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	clear(b.hits)
}

// Hits is the calls each backend served since the last Reset, by name.
func (b *CountingBackends) Hits() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.hits)
}

// Endpoint is a ServiceEntry endpoint for backend name, its grpc port
// named, with extra fields (", locality: …") appended.
func (b *CountingBackends) Endpoint(name, extra string) string {
	h, p, _ := net.SplitHostPort(b.Addr[name])
	return fmt.Sprintf("{address: %s, ports: {grpc: %s}%s}", h, p, extra)
}

// ServiceWithPolicy is a STATIC MESH_INTERNAL ServiceEntry name in
// namespace demo for host (gRPC port 7070, endpoints as given) and its
// DestinationRule with trafficPolicy.
func ServiceWithPolicy(name, host string, endpoints []string, trafficPolicy string) string {
	return `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ` + name + `, namespace: demo}
spec:
  hosts: [` + host + `]
  location: MESH_INTERNAL
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  endpoints: [` + strings.Join(endpoints, ", ") + `]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: ` + name + `, namespace: demo}
spec:
  host: ` + host + `
  trafficPolicy: ` + trafficPolicy + `
`
}
