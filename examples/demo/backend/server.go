package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/xds"
)

// backendHeader is the response header that names the instance which answered a call.
const backendHeader = "x-nave-backend"

// backend is the behaviour of one echo instance, applied to every unary call. It is safe
// for concurrent use: its fields are not changed after construction, and roll must itself
// be safe to call from many goroutines.
type backend struct {
	name     string
	failRate float64
	delay    time.Duration
	// roll returns a number in [0, 1); a call fails when it is below failRate.
	roll func() float64
}

// intercept names the backend in the response header, decides whether the call fails,
// waits out the delay, then fails the call or hands it on.
func (b *backend) intercept(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := grpc.SetHeader(ctx, metadata.Pairs(backendHeader, b.name)); err != nil {
		return nil, status.Errorf(codes.Internal, "set %s header: %v", backendHeader, err)
	}
	fail := b.failRate > 0 && b.roll() < b.failRate
	if b.delay > 0 {
		t := time.NewTimer(b.delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	if fail {
		return nil, status.Errorf(codes.Unavailable, "%s: injected failure", b.name)
	}
	return handler(ctx, req)
}

// grpcServer is what serve needs of a gRPC server: a grpc.Server or grpc-go's xDS server.
type grpcServer interface {
	grpc.ServiceRegistrar
	Serve(net.Listener) error
	GracefulStop()
	Stop()
}

// newServer is a plain gRPC server for b, or with xdsServer grpc-go's xDS server (gRFC A36),
// which reads the bootstrap named by GRPC_XDS_BOOTSTRAP, serves only once the hub sent its
// listener, and takes its transport security from that listener (mTLS with PeerAuthentication
// STRICT, with the workload certificate of the bootstrap's certificate providers; plain text
// otherwise).
func newServer(b *backend, xdsServer bool, log *slog.Logger) (grpcServer, error) {
	if !xdsServer {
		return grpc.NewServer(grpc.UnaryInterceptor(b.intercept)), nil
	}
	creds, err := xdscreds.NewServerCredentials(xdscreds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		return nil, fmt.Errorf("xds server credentials: %w", err)
	}
	srv, err := xds.NewGRPCServer(grpc.Creds(creds), grpc.UnaryInterceptor(b.intercept),
		xds.ServingModeCallback(func(addr net.Addr, args xds.ServingModeChangeArgs) {
			log.Info("xds serving mode", "addr", addr.String(), "mode", args.Mode.String(), "error", args.Err)
		}))
	if err != nil {
		return nil, fmt.Errorf("xds server: %w", err)
	}
	return srv, nil
}

// serve answers gRPC on lis with srv until ctx ends, then stops: health turns NOT_SERVING,
// calls in flight get up to grace to finish, and whatever is left is cut. It returns nil
// after a shutdown that ctx asked for, and an error if serving failed on its own.
func serve(ctx context.Context, lis net.Listener, srv grpcServer, b *backend, grace time.Duration, log *slog.Logger) error {
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve grpc on %s: %w", lis.Addr(), err)
	case <-ctx.Done():
	}

	hs.Shutdown()
	stopped := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(stopped)
	}()
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-stopped:
		log.Info("backend stopped", "name", b.name)
	case <-timer.C:
		srv.Stop()
		<-stopped
		log.Info("backend stopped, in-flight calls cut", "name", b.name, "grace", grace)
	}
	<-served
	return nil
}
