package ingest

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	protocolv1 "github.com/navemesh/nave/protocol/v1"
)

// WatchHandler serves one Watch stream of the spoke id, whose identity the
// Server has authenticated as for Push (hub/watch.Server serves it).
type WatchHandler func(id ClusterIdentity, stream protocolv1.Sync_WatchServer) error

// Watch authenticates a spoke's Watch stream exactly as Push (the mesh and
// cluster come from its identity, never from a field it sends) and hands
// it to Options.Watch.
func (s *Server) Watch(stream protocolv1.Sync_WatchServer) error {
	if s.opts.Watch == nil {
		return status.Error(codes.Unimplemented, "this hub does not serve Watch")
	}
	id, err := s.admitWatch(stream)
	if err != nil {
		return err
	}
	return s.opts.Watch(id, stream)
}

// PollWatch serves the Watch stream the hub opened to a polled spoke
// (hub/poll), authenticated as Poll: the spoke's certificate and header,
// and it must be want, the cluster configured at that address.
func (s *Server) PollWatch(stream protocolv1.Sync_WatchServer, want ClusterIdentity) error {
	if s.opts.Watch == nil {
		return status.Error(codes.Unimplemented, "this hub does not serve Watch")
	}
	id, err := s.admitWatch(stream)
	if err != nil {
		return err
	}
	if err := s.checkPolled(stream.Context(), id, want); err != nil {
		return err
	}
	return s.opts.Watch(id, stream)
}

func (s *Server) admitWatch(stream protocolv1.Sync_WatchServer) (ClusterIdentity, error) {
	id, err := s.auth.Authenticate(stream.Context())
	if err != nil {
		s.metrics.refused.Inc()
		s.log.Warn("spoke watch refused", "reason", err)
		return id, err
	}
	if err := checkProtocol(stream.Context()); err != nil {
		s.metrics.refused.Inc()
		s.log.Warn("spoke watch refused", "mesh", id.Mesh, "cluster", id.Cluster, "reason", err)
		return id, err
	}
	s.checkClaim(stream.Context(), id)
	return id, nil
}
