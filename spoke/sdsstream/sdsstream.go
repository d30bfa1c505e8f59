// Package sdsstream holds what the spoke side's two state-of-the-world SDS
// servers share — nave-agent's, serving Envoy, and the spoke's
// gateway-credentials server, serving agents: the requests of a stream
// received on a goroutine of their own, so that a server selects on them
// and on its own changes, and the checks of each request.
package sdsstream

import (
	"context"
	"errors"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/navemesh/nave/shared/typeurl"
)

// Stream is the receiving side of an SDS stream.
type Stream interface {
	Context() context.Context
	Recv() (*discoveryv3.DiscoveryRequest, error)
}

// Requests receives s's requests on a goroutine of its own until s ends:
// each request on the first channel, then the error that ended it on the
// second (buffered). The goroutine stops when s's context ends.
func Requests(s Stream) (<-chan *discoveryv3.DiscoveryRequest, <-chan error) {
	reqs := make(chan *discoveryv3.DiscoveryRequest)
	errc := make(chan error, 1)
	go func() {
		for {
			req, err := s.Recv()
			if err != nil {
				errc <- err
				return
			}
			select {
			case reqs <- req:
			case <-s.Context().Done():
				return
			}
		}
	}()
	return reqs, errc
}

// Ended is what a server returns for the receive error that ended a
// stream: nil when the client went away.
func Ended(err error) error {
	if errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled {
		return nil
	}
	return err
}

// Check returns the error that ends a stream for req: another type than
// secrets. Nil otherwise.
func Check(req *discoveryv3.DiscoveryRequest) error {
	if req.GetTypeUrl() != "" && req.GetTypeUrl() != typeurl.Secret {
		return status.Errorf(codes.InvalidArgument, "type %s: this server serves only secrets (%s)", req.GetTypeUrl(), typeurl.Secret)
	}
	return nil
}
