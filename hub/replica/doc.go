// Package replica makes the hub a set of replicas that each serve every
// proxy of every mesh (docs/replicas.md).
//
// Replicas find each other with hashicorp/memberlist (a seed list or the
// DNS name of a headless Service; gossip encrypted with a keyring read from
// a file): Membership. A spoke's Push stream lands on one replica, its
// owner; the owner relays the cluster's applied state to every peer over
// the Push protocol itself, on a separate listener where replicas
// authenticate each other with certificates of the hub's serving CA
// (Relayer, RelayServer; docs/decisions/015-replica-relay.md). Each relayed
// stream carries the cluster's ownership epoch (ingest.Epoch), so that a
// late relay from an earlier owner changes nothing. A peer's ingest holds
// relayed clusters exactly like its own spokes' — staged until the synced
// marker, pruned only then, kept as stale when the stream ends — so no
// replica death, restart or partition shows a proxy a removal no spoke made
// (docs/design.md invariant 8).
//
// The replica set reaches the local ingest only through Ingest
// (ingest.Ownership implements it), and ingest asks it back through
// ingest.ReplicaSet (Membership decides withdrawals, Relayer follows
// changes).
//
// Withdrawing a stale cluster after its grace period is decided by one
// replica: its owner while the owner lives, else the leader (the lowest
// id among live members); and only by a replica that sees a majority of
// the members seen lately, so a replica cut off from its peers never
// withdraws what it cannot see (docs/decisions/016-replica-leader.md).
//
// A Balancer sheds proxy connections (TrackedListener) gradually: a
// proxy whose node names another ready replica its home (decision 051),
// so that it returns there, and, of those without a home, what a replica
// holds beyond its share of an even spread over the ready replicas, so
// that one that joins gets its share.
package replica
