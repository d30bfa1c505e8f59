// Package ingest holds the state spokes push to the hub, one record per
// (mesh, cluster), and serves the streams that push it.
//
// Store keeps the records: each cluster's state (State, the one value
// ClusterStatus, Holding and the snapshot's mesh.ClusterInput are made
// from), its resources, what its stream has staged until its synced marker
// (a spoke that dies in the middle of its full state changes nothing), its
// ownership epoch, and its withdrawal after the grace period: losing a
// spoke never blackholes, and nothing is deleted before the grace period
// has passed. Its startup rule (Ready) keeps a restarted hub from showing
// proxies a mesh without a cluster that is merely slow to come back
// (docs/design.md invariant 8). It reports changes through a non-blocking
// callback: ingest never waits on pushes (docs/design.md invariant 7).
//
// Server serves the Sync service: it authenticates each stream, writes
// what a spoke sends only to the spoke's own (mesh, cluster), from its
// authenticated identity (docs/design.md invariant 1), NACKs a bad resource
// with a reason naming it while the last good version stays, and lets a
// reconnecting spoke resume (a reconnect with unchanged state pushes
// nothing).
//
// Ownership is the seam hub/replica uses: relayed streams from peer
// replicas, spoke moves, withdrawals decided by a peer, and the holdings
// the replica set gossips; ReplicaSet is what the Store asks back.
package ingest
