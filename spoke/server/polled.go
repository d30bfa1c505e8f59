package server

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/grpcserve"
	"github.com/navemesh/nave/shared/handshake"
	"github.com/navemesh/nave/spoke/enroll"
	"github.com/navemesh/nave/spoke/uplink"
)

// runPolled serves the hub's Poll streams on lis (hub.mode polled) until
// ctx ends: with the cluster certificate, requiring the hub's own
// certificate (enroll.Renewer.PolledTLS); without TLS when renewer is nil
// (hub.plaintext). hs counts and logs its failed handshakes.
func runPolled(ctx context.Context, up *uplink.Uplink, lis net.Listener, renewer *enroll.Renewer, hs *handshake.Failures) error {
	ka := keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}
	opts := []grpc.ServerOption{grpc.KeepaliveEnforcementPolicy(ka),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second})}
	if renewer != nil {
		opts = append(opts, grpc.Creds(hs.Credentials("hub.pollListen", credentials.NewTLS(renewer.PolledTLS(up.RefusedHub)))), grpc.ConnectionTimeout(10*time.Second))
	}
	srv := grpc.NewServer(opts...)
	protocolv1.RegisterPolledServer(srv, polledServer{up: up})
	stop := context.AfterFunc(ctx, up.EndPoll)
	defer stop()
	if err := grpcserve.Serve(ctx, srv, lis, 5*time.Second); err != nil {
		return fmt.Errorf("hub.pollListen: %w", err)
	}
	return nil
}

// polledServer serves the Polled service with the uplink's Poll.
type polledServer struct {
	protocolv1.UnimplementedPolledServer
	up *uplink.Uplink
}

func (s polledServer) Poll(stream protocolv1.Polled_PollServer) error { return s.up.Poll(stream) }

func (s polledServer) PollWatch(stream protocolv1.Polled_PollWatchServer) error {
	return s.up.PollWatch(stream)
}
