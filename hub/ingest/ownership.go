package ingest

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	protocolv1 "github.com/navemesh/nave/protocol/v1"
)

// ReplicaSet is what a Store asks of the hub replica set it is part of
// (hub/replica). Implementations must be safe for concurrent use;
// ReplicaFuncs adapts functions.
type ReplicaSet interface {
	// Self is this replica's id, which the epochs of its spokes' streams
	// carry; "" for a single hub. Asked once, by NewStore.
	Self() string
	// MayWithdraw decides, when a disconnected cluster's grace period is
	// over, whether this replica withdraws it now; owner is the replica
	// whose stream last wrote it (Self for a spoke's own). It is called
	// with the Store's lock held: it must not call the Store.
	MayWithdraw(id ClusterIdentity, owner string) bool
	// Withdrawn is told, without locks held, of a cluster withdrawn at
	// the end of its grace period, with its epoch (the peers are told,
	// and call Ownership.WithdrawRelayed). It must not block.
	Withdrawn(id ClusterIdentity, epoch Epoch)
	// Changed is told, without locks held, after a cluster's stored
	// state, stream or epoch changed (the relay follows it). It must not
	// block.
	Changed(id ClusterIdentity)
}

// ReplicaFuncs adapts functions to ReplicaSet: ID is Self; a nil
// MayWithdrawFunc always allows, other nil funcs do nothing. Its zero
// value is a single hub's. A plain value.
type ReplicaFuncs struct {
	ID              string
	MayWithdrawFunc func(id ClusterIdentity, owner string) bool
	WithdrawnFunc   func(id ClusterIdentity, epoch Epoch)
	ChangedFunc     func(id ClusterIdentity)
}

// Self returns f.ID.
func (f ReplicaFuncs) Self() string { return f.ID }

// MayWithdraw calls f.MayWithdrawFunc, if set; else it allows.
func (f ReplicaFuncs) MayWithdraw(id ClusterIdentity, owner string) bool {
	return f.MayWithdrawFunc == nil || f.MayWithdrawFunc(id, owner)
}

// Withdrawn calls f.WithdrawnFunc, if set.
func (f ReplicaFuncs) Withdrawn(id ClusterIdentity, epoch Epoch) {
	if f.WithdrawnFunc != nil {
		f.WithdrawnFunc(id, epoch)
	}
}

// Changed calls f.ChangedFunc, if set.
func (f ReplicaFuncs) Changed(id ClusterIdentity) {
	if f.ChangedFunc != nil {
		f.ChangedFunc(id)
	}
}

// Ownership is the ingest side of a hub replica set (hub/replica uses it,
// docs/decisions/015-replica-relay.md): the clusters this replica holds,
// with their owner and epoch; a peer's relay of its spoke's stream taken
// in; a spoke moved to another replica; a cluster a peer withdrew
// withdrawn here too. Every change it makes goes through the Store's rules
// (staging until the synced marker, epochs, grace), so no replica death,
// restart or partition shows a proxy a removal no spoke made
// (docs/design.md invariant 8). It is safe for concurrent use.
type Ownership struct {
	srv *Server
}

// NewOwnership returns the Ownership of srv's Store; relayed streams are
// served by srv (as Push streams, without their authentication).
func NewOwnership(srv *Server) *Ownership { return &Ownership{srv: srv} }

// Holdings lists the clusters held that f selects, by identity.
func (o *Ownership) Holdings(f HoldingFilter) []Holding { return o.srv.store.holdings(f) }

// Relay serves a stream on which the peer replica owner relays the state
// of its spoke id under epoch: it is held exactly like a spoke's own
// stream (staged until the synced marker, pruned only then, never on
// disconnect), unless the cluster already has a newer epoch — a late
// relay from an earlier owner — which is refused with FailedPrecondition.
// The caller has authenticated the peer as a replica.
func (o *Ownership) Relay(stream protocolv1.Sync_PushServer, id ClusterIdentity, owner string, epoch Epoch) error {
	if err := checkProtocol(stream.Context()); err != nil {
		return err
	}
	if h := o.srv.opts.Hosted; h != nil && !h(id.Mesh) {
		return status.Errorf(codes.PermissionDenied, "mesh %q is not a mesh of this hub replica", id.Mesh)
	}
	suffix, err := domainSuffix(stream.Context())
	if err != nil {
		return err
	}
	return o.srv.serve(stream, id, suffix, origin{relayed: true, owner: owner, epoch: epoch})
}

// Move closes id's open stream, if it is a spoke's own (not a relay) and
// still the stream of epoch, so that the spoke reconnects at once, to
// another hub replica (hub/replica balances spokes): the spoke gets
// UNAVAILABLE with the trailers protocol.TrailerReconnect and, if redirect
// is set, protocol.TrailerRedirect naming the replica to try first. The
// cluster's resources stay, as for any disconnect, until the spoke's new
// stream (here or relayed by its new owner) replaces them. It reports
// whether a stream was closed; a polled spoke's never is.
func (o *Ownership) Move(id ClusterIdentity, epoch Epoch, reason, redirect string) bool {
	return o.srv.store.move(id, epoch, reason, redirect)
}

// WithdrawRelayed withdraws id as a peer replica did after its grace
// period, unless id is connected here or holds a newer epoch than epoch
// (it came back since). It reports whether it withdrew.
func (o *Ownership) WithdrawRelayed(id ClusterIdentity, epoch Epoch, reason string) bool {
	return o.srv.store.withdrawRelayed(id, epoch, reason)
}
