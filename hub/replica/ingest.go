package replica

import (
	"github.com/navemesh/nave/hub/ingest"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
)

// Ingest is the local ingest as the replica set uses it: the clusters it
// holds, a peer's relayed stream taken in, a spoke moved away, a cluster a
// peer withdrew withdrawn here too. ingest.Ownership implements it;
// implementations must be safe for concurrent use.
type Ingest interface {
	// Holdings lists the clusters held that f selects, by identity.
	Holdings(f ingest.HoldingFilter) []ingest.Holding
	// Relay serves a peer's relay of its spoke id's stream under epoch.
	Relay(stream protocolv1.Sync_PushServer, id ingest.ClusterIdentity, owner string, epoch ingest.Epoch) error
	// Move closes id's spoke stream of epoch so that it reconnects
	// elsewhere, trying redirect first; it reports whether it did.
	Move(id ingest.ClusterIdentity, epoch ingest.Epoch, reason, redirect string) bool
	// WithdrawRelayed withdraws id as a peer did after its grace period,
	// unless it came back since; it reports whether it withdrew.
	WithdrawRelayed(id ingest.ClusterIdentity, epoch ingest.Epoch, reason string) bool
}

var _ Ingest = (*ingest.Ownership)(nil)

// holding returns id as in holds it, with its resources if objects is
// set.
func holding(in Ingest, id ingest.ClusterIdentity, objects bool) (ingest.Holding, bool) {
	hs := in.Holdings(ingest.HoldingFilter{Only: id, Objects: objects})
	if len(hs) == 0 {
		return ingest.Holding{}, false
	}
	return hs[0], true
}
