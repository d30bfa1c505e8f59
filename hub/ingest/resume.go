package ingest

import (
	"fmt"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/navemesh/nave/protocol"
)

// resume answers a stream's Resume message (docs/protocol.md, Resume on
// reconnect): when the hub holds a complete state of id (it synced, from
// the spoke or a relay, and was not withdrawn since), the names and
// versions of that state — for a type whose digest equals the one the
// sender sent, only that it holds the same (protocol.HintMessages) —
// then an ACK: the sender sends only what differs,
// removals included. The hub then holds the stream's session to what it
// hinted: every resource it held counts as sent by this stream, so the
// synced marker prunes nothing the sender did not remove. Otherwise it
// refuses resuming (the sender sends its full state and the marker prunes
// as usual). A Resume that is not the stream's first message is NACKed.
//
// The hint cannot go stale before the marker: a cluster's store is written
// only by its current session, and a newer stream (the spoke's, or a relay
// of a later epoch) supersedes this one, whose messages then change
// nothing.
func (s *Server) resume(id ClusterIdentity, session uint64, kind string, first bool, m *discoveryv3.DeltaDiscoveryResponse) []*discoveryv3.DeltaDiscoveryRequest {
	reply := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: m.GetTypeUrl(), ResponseNonce: m.GetNonce()}
	if m.GetNonce() == "" {
		return []*discoveryv3.DeltaDiscoveryRequest{s.nack(id, reply, "message has no nonce", nil)}
	}
	if !first {
		return []*discoveryv3.DeltaDiscoveryRequest{s.nack(id, reply, "Resume must be a stream's first message", nil)}
	}
	s.mu.Lock()
	st := s.stores[id]
	if st == nil || st.session != session {
		s.mu.Unlock()
		return []*discoveryv3.DeltaDiscoveryRequest{s.nack(id, reply, "stream superseded", nil)}
	}
	if !st.everSynced {
		s.mu.Unlock()
		s.metrics.resumes.WithLabelValues(kind, "full").Inc()
		s.log.Info("stream asked to resume; no complete state held, asking for the full state", "mesh", id.Mesh, "cluster", id.Cluster, "stream", kind)
		return []*discoveryv3.DeltaDiscoveryRequest{protocol.ResumeAnswer(m.GetNonce(), fmt.Sprintf("this hub holds no complete state of cluster %s: send the full state", id))}
	}
	held := protocol.Held{}
	st.hinted = map[resourceKey]struct{}{}
	for typeURL, byName := range st.resources {
		if len(byName) == 0 {
			continue
		}
		vs := make(map[string]string, len(byName))
		for name, e := range byName {
			vs[name] = e.obj.Version
			// Held and not contradicted by the sender: as if sent anew.
			e.session = session
			st.hinted[resourceKey{typeURL, name}] = struct{}{}
		}
		held[typeURL] = vs
	}
	st.resumed = true
	n := len(st.hinted)
	s.mu.Unlock()
	out := append(protocol.HintMessages(held, protocol.Digests(m), s.opts.MaxMessageBytes/2), protocol.ResumeAnswer(m.GetNonce(), ""))
	s.metrics.resumes.WithLabelValues(kind, "resumed").Inc()
	s.metrics.messages.WithLabelValues("ack").Inc()
	s.log.Info("stream resumed", "mesh", id.Mesh, "cluster", id.Cluster, "stream", kind, "held", n, "hintMessages", len(out)-1)
	return out
}
