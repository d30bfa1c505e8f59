package poll

import (
	"context"
	"sync/atomic"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	protocolv1 "github.com/navemesh/nave/protocol/v1"
)

// serverStream is the hub's client end of a stream it dialled to a polled
// spoke, seen as the server end of the same exchange dialled the other way
// — what ingest serves: a Poll client stream as a Push server stream
// (protocolv1.Sync_PushServer), a PollWatch client stream as a Watch server
// stream (protocolv1.Sync_WatchServer). Send and Recv are the client
// stream's; its Context carries the spoke's response header as incoming
// metadata (the spoke names itself there, as a dialling spoke does in its
// request metadata) beside the TLS peer; there are no headers or
// trailers of its own to set. Safe for the use a gRPC stream allows: one
// sender and one receiver.
type serverStream[In, Out any] struct {
	grpc.BidiStreamingClient[Out, In]
	ctx context.Context
	// admitted, if set, is called on the first Send: ingest answers only
	// a stream it admitted.
	admitted func()
	sent     atomic.Bool
}

var (
	_ protocolv1.Sync_PushServer  = (*serverStream[discoveryv3.DeltaDiscoveryResponse, discoveryv3.DeltaDiscoveryRequest])(nil)
	_ protocolv1.Sync_WatchServer = (*serverStream[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse])(nil)
)

// asServer wraps the client stream cs, whose peer sent header.
func asServer[In, Out any](cs grpc.BidiStreamingClient[Out, In], header metadata.MD, admitted func()) *serverStream[In, Out] {
	return &serverStream[In, Out]{BidiStreamingClient: cs, ctx: metadata.NewIncomingContext(cs.Context(), header), admitted: admitted}
}

func (s *serverStream[In, Out]) Context() context.Context { return s.ctx }

func (s *serverStream[In, Out]) Send(m *Out) error {
	if !s.sent.Swap(true) && s.admitted != nil {
		s.admitted()
	}
	return s.BidiStreamingClient.Send(m)
}

func (s *serverStream[In, Out]) SetHeader(metadata.MD) error  { return nil }
func (s *serverStream[In, Out]) SendHeader(metadata.MD) error { return nil }
func (s *serverStream[In, Out]) SetTrailer(metadata.MD)       {}
