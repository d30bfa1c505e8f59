package ingest

import (
	"fmt"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/navemesh/nave/protocol"
)

// resume answers a stream's Resume message (docs/protocol.md, Resume on
// reconnect): when the Store holds a complete state of the cluster (it
// synced, from the spoke or a relay, and was not withdrawn since), the
// names and versions of that state — for a type whose digest equals the
// one the sender sent, only that it holds the same
// (protocol.HintMessages) — then an ACK: the sender sends only what
// differs, removals included. Otherwise it refuses resuming (the sender
// sends its full state and the marker prunes as usual). A Resume that is
// not the stream's first message is NACKed.
func (s *Server) resume(ss *session, kind string, first bool, m *discoveryv3.DeltaDiscoveryResponse) []*discoveryv3.DeltaDiscoveryRequest {
	id := ss.id
	reply := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: m.GetTypeUrl(), ResponseNonce: m.GetNonce()}
	if m.GetNonce() == "" {
		return []*discoveryv3.DeltaDiscoveryRequest{s.nack(id, reply, "message has no nonce", nil)}
	}
	if !first {
		return []*discoveryv3.DeltaDiscoveryRequest{s.nack(id, reply, "Resume must be a stream's first message", nil)}
	}
	held, complete, current := ss.hint()
	switch {
	case !current:
		return []*discoveryv3.DeltaDiscoveryRequest{s.nack(id, reply, "stream superseded", nil)}
	case !complete:
		s.metrics.resumes.WithLabelValues(kind, "full").Inc()
		s.log.Info("stream asked to resume; no complete state held, asking for the full state", "mesh", id.Mesh, "cluster", id.Cluster, "stream", kind)
		return []*discoveryv3.DeltaDiscoveryRequest{protocol.ResumeAnswer(m.GetNonce(), fmt.Sprintf("this hub holds no complete state of cluster %s: send the full state", id))}
	}
	out := append(protocol.HintMessages(held, protocol.Digests(m), s.opts.MaxMessageBytes/2), protocol.ResumeAnswer(m.GetNonce(), ""))
	s.metrics.resumes.WithLabelValues(kind, "resumed").Inc()
	s.metrics.messages.WithLabelValues("ack").Inc()
	s.log.Info("stream resumed", "mesh", id.Mesh, "cluster", id.Cluster, "stream", kind, "held", held.Count(), "hintMessages", len(out)-1)
	return out
}

// hint is the Store's half of resume: the names and versions of the
// cluster's complete state, if it holds one (complete), and whether the
// session is still current. From then on every resource held counts as
// sent by the session, so that its synced marker prunes nothing the sender
// did not remove.
//
// The hint cannot go stale before the marker: a cluster's record is
// written only by its current session, and a newer stream (the spoke's, or
// a relay of a later epoch) supersedes this one, whose messages then
// change nothing.
func (ss *session) hint() (held protocol.Held, complete, current bool) {
	ss.s.mu.Lock()
	defer ss.s.mu.Unlock()
	r := ss.current()
	if r == nil {
		return nil, false, false
	}
	if !r.EverSynced {
		return nil, false, true
	}
	held = protocol.Held{}
	r.hinted = map[resourceKey]struct{}{}
	for typeURL, byName := range r.resources {
		if len(byName) == 0 {
			continue
		}
		vs := make(map[string]string, len(byName))
		for name, e := range byName {
			vs[name] = e.obj.Version
			// Held and not contradicted by the sender: as if sent anew.
			e.session = ss.n
			r.hinted[resourceKey{typeURL, name}] = struct{}{}
		}
		held[typeURL] = vs
	}
	r.Resumed = true
	return held, true, true
}
