package ingest

import (
	"time"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/mesh"
)

// State is one cluster's state as a Store holds it: its identity, its
// stream, its sync state and its ownership. It is the one value of a
// cluster's state: ClusterStatus and Holding embed it, and the
// mesh.ClusterInput a snapshot reads is made from it (Store.Clusters). A
// plain value.
type State struct {
	ClusterIdentity
	// Peer is the address of the current or last stream's peer.
	Peer      string `json:"peer,omitempty"`
	Connected bool   `json:"connected"`
	// Synced is set once the current or last stream sent its synced
	// marker; EverSynced once any stream did: the Store then holds a
	// complete state of the cluster.
	Synced     bool `json:"synced"`
	EverSynced bool `json:"everSynced,omitempty"`
	// DomainSuffix is the cluster's DNS suffix, as its spoke said.
	DomainSuffix  string    `json:"domainSuffix,omitempty"`
	ConnectedAt   time.Time `json:"connectedAt"`
	LastMessageAt time.Time `json:"lastMessageAt"`
	Acks          uint64    `json:"acks"`
	Nacks         uint64    `json:"nacks"`
	// Epoch is the cluster's current ownership epoch; Owner the replica
	// holding the spoke's stream, and Relayed set when that is a peer
	// (the state came through its relay). See hub/replica.
	Epoch   Epoch  `json:"epoch"`
	Owner   string `json:"owner,omitempty"`
	Relayed bool   `json:"relayed,omitempty"`
	// Polled is set when the stream was dialled by the hub (polled mode;
	// /debug/polled has the dialling side): its replica is decided by
	// hub/poll, not by balancing.
	Polled bool `json:"polled,omitempty"`
	// Resumed is set when the current or last stream resumed: the hub
	// told it what it held and it sent only what differed.
	Resumed bool `json:"resumed,omitempty"`
}

// input is c as a snapshot reads it, with objs, its applied resources.
func (c State) input(objs []*meshconfig.Object) mesh.ClusterInput {
	return mesh.ClusterInput{Name: c.Cluster, Connected: c.Connected, Synced: c.Synced, Stale: !c.Connected,
		DomainSuffix: c.DomainSuffix, Objects: objs}
}

// ClusterStatus is what /debug/spokes shows for one cluster: its state,
// what it holds and, for a cluster that holds nothing, why. A plain value.
type ClusterStatus struct {
	State
	Stale          bool       `json:"stale"`
	DisconnectedAt *time.Time `json:"disconnectedAt,omitempty"`
	WithdrawAt     *time.Time `json:"withdrawAt,omitempty"`
	// Resources counts the applied resources by kind.
	Resources map[string]int         `json:"resources"`
	Rejected  []meshconfig.Rejection `json:"rejected"`
	// Pending counts what the stream sent that waits for its synced marker.
	Pending int `json:"pending,omitempty"`
	// Withdrawn is set for a cluster withdrawn after its grace period that
	// has not reconnected since; it contributes nothing.
	Withdrawn *Withdrawal `json:"withdrawn,omitempty"`
	// Missing is set for an enrolled cluster that has not connected since
	// the hub started: when the hub started waiting for it.
	Missing *time.Time `json:"missing,omitempty"`
}

// Withdrawal says when and why a cluster's resources were withdrawn. A
// plain value.
type Withdrawal struct {
	At        time.Time `json:"at"`
	Reason    string    `json:"reason"`
	Resources int       `json:"resources"`
}

// Holding is one cluster as this hub holds it, for the replica relay and
// its readiness (Ownership.Holdings): its state and, when asked for, its
// applied resources. A plain value; Objects are immutable and shared.
type Holding struct {
	State
	// Objects are the applied resources by type URL and name (what is
	// served; nothing staged): set only when asked for, and only once
	// EverSynced.
	Objects map[string]map[string]*meshconfig.Object
	// Rev grows with every change of the applied resources.
	Rev uint64
	// Changes, set instead of Objects when HoldingFilter.ChangedSince
	// named a Rev the cluster still knows the changes since, are the
	// applied resources changed since that Rev, by type URL and name (nil:
	// removed).
	Changes map[string]map[string]*meshconfig.Object
}

// HoldingFilter selects what Ownership.Holdings lists. A plain value.
type HoldingFilter struct {
	// Only, if set, selects that one cluster; the zero value every one.
	Only ClusterIdentity
	// Objects asks for each cluster's applied resources.
	Objects bool
	// ChangedSince, with Objects, asks for only what changed after this
	// Holding.Rev (Holding.Changes) where the cluster still knows it: the
	// replica relay's next diff costs what changed, not the cluster's
	// size. 0 asks for every object.
	ChangedSince uint64
}
