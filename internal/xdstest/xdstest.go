// Package xdstest runs grpc-go xDS servers against a hub in tests.
package xdstest

import (
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/xds"
)

// ServeHealth runs a grpc-go xDS server with the given bootstrap on lis,
// serving gRPC health, with xDS server credentials (the listener the hub
// sends decides TLS; plain text otherwise) and opts. It returns once the
// server got its listener from the hub and serves, or fails the test after
// deadline; the server stops with the test.
func ServeHealth(t testing.TB, lis net.Listener, bootstrap []byte, deadline time.Duration, opts ...grpc.ServerOption) *xds.GRPCServer {
	t.Helper()
	creds, err := xdscreds.NewServerCredentials(xdscreds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatal(err)
	}
	serving := make(chan struct{})
	var once sync.Once
	opts = append([]grpc.ServerOption{grpc.Creds(creds), xds.BootstrapContentsForTesting(bootstrap),
		xds.ServingModeCallback(func(_ net.Addr, args xds.ServingModeChangeArgs) {
			if args.Mode == connectivity.ServingModeServing {
				once.Do(func() { close(serving) })
			}
		})}, opts...)
	srv, err := xds.NewGRPCServer(opts...)
	if err != nil {
		t.Fatal(err)
	}
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	select {
	case <-serving:
	case <-time.After(deadline):
		t.Fatalf("the xDS server on %s never got its listener from the hub", lis.Addr())
	}
	return srv
}
