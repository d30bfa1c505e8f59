// Package grpcserve runs a gRPC server for as long as a context lives and
// stops it gracefully: the one way the hub, the spoke and its registration
// authority serve gRPC.
package grpcserve

import (
	"context"
	"net"
	"time"

	"google.golang.org/grpc"
)

// Serve serves srv on lis until ctx ends, then stops it gracefully: open
// RPCs get up to grace to finish before they are cut. It returns nil once
// srv has stopped after ctx ended, or the error that made serving fail
// before (srv is then stopped). Serve returns only after srv has stopped;
// it may be called once per srv.
func Serve(ctx context.Context, srv *grpc.Server, lis net.Listener, grace time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	select {
	case err := <-errc:
		srv.Stop()
		return err
	case <-ctx.Done():
	}
	Stop(srv, grace)
	<-errc // nil after a stop
	return nil
}

// Stop stops srv gracefully: open RPCs get up to grace to finish, then
// are cut. It returns once srv has stopped.
func Stop(srv *grpc.Server, grace time.Duration) {
	done := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(done)
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		srv.Stop()
		<-done
	}
}
