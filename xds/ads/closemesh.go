package ads

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// CloseMesh ends every stream of mesh at once with PermissionDenied and
// reason — for a mesh the hub stops serving (deleted): its proxies must
// not keep a config the hub no longer stands behind. It reports how many
// it closed. Keeping them from connecting again is Options.Hosted's part:
// call CloseMesh after Hosted answers false for mesh, and no stream of
// mesh survives (accept checks Hosted again once the stream is listed).
func (s *Server) CloseMesh(mesh, reason string) int {
	s.mu.Lock()
	n := 0
	for _, c := range s.conns {
		if c.mesh == mesh {
			c.close(reason)
			n++
		}
	}
	s.mu.Unlock()
	if n > 0 {
		s.log.Warn("proxy streams of a mesh closed by the hub", "mesh", mesh, "streams", n, "reason", reason)
	}
	return n
}

// close ends c's stream with reason; only the first call counts.
func (c *conn) close(reason string) {
	c.closeOnce.Do(func() {
		c.closeReason = reason
		close(c.closed)
	})
}

// closing is closed when the stream is to end (CloseMesh); nil before
// the stream is accepted.
func (c *conn) closing() <-chan struct{} {
	if c == nil {
		return nil
	}
	return c.closed
}

// closedErr is what the proxy of a closed stream is told.
func (c *conn) closedErr() error {
	return status.Errorf(codes.PermissionDenied, "the hub closed this stream: %s", c.closeReason)
}
