package replica

import (
	"hash/fnv"

	"github.com/navemesh/nave/hub/ingest"
)

// PollOwner is the replica that dials polled spoke id (hub/poll): of the
// live members, the one whose id scores highest with id's (rendezvous
// hashing), so every replica that sees the same members picks the same
// owner, and a member joining or leaving moves only the spokes it gains
// or loses. "" when no member is alive.
func (m *Membership) PollOwner(id ingest.ClusterIdentity) string {
	return pollOwner(id, m.alive())
}

// OwnsPolled is hub/poll's Options.Mine: this replica dials id when it is
// id's PollOwner and sees a majority of the set — a replica cut off from
// most of its peers dials no polled spoke, so the two sides of a partition
// never both hold one (the spoke would also serve only the newer of two
// streams, and a cluster's epochs order them).
func (m *Membership) OwnsPolled(id ingest.ClusterIdentity) bool {
	if ok, _, _ := m.Quorum(); !ok {
		return false
	}
	return m.PollOwner(id) == m.opts.ID
}

func pollOwner(id ingest.ClusterIdentity, members []string) string {
	var best string
	var bestScore uint64
	for _, member := range members {
		h := fnv.New64a()
		h.Write([]byte(id.Mesh + "/" + id.Cluster + "@" + member))
		if s := h.Sum64(); best == "" || s > bestScore || (s == bestScore && member < best) {
			best, bestScore = member, s
		}
	}
	return best
}
