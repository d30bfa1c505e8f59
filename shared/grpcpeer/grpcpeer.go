// Package grpcpeer names the remote end of a gRPC call for logs.
package grpcpeer

import (
	"context"

	"google.golang.org/grpc/peer"
)

// Addr is the address of ctx's gRPC peer, or "" when the context has none.
func Addr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}
