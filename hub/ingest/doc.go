// Package ingest holds the state spokes push to the hub, one record per
// (mesh, cluster), and serves the streams that push it.
//
// Store keeps the records: each cluster's State (the one value
// ClusterStatus, Holding and the snapshot's mesh.ClusterInput are made
// from), its resources, what its current stream has staged until its
// synced marker (a spoke that dies in the middle of its full state changes
// nothing), its ownership epoch, and its withdrawal: a disconnected cluster
// is kept, stale, for its grace period, then withdrawn, so losing a spoke
// never blackholes traffic (docs/design.md invariant 4). Its startup rule
// (Ready) keeps a restarted hub from showing proxies a mesh without a
// cluster that is merely slow to come back (docs/design.md invariant 8).
// It reports changes through one non-blocking callback: ingest never waits
// on pushes (docs/design.md invariant 7).
//
// Server serves the Sync service: it authenticates each stream and writes
// what a spoke sends only to the spoke's own (mesh, cluster), decided from
// its authenticated identity (docs/design.md invariant 1); it NACKs a bad
// resource with a reason naming it while the last good version stays
// (docs/design.md invariant 3); and it lets a reconnecting spoke resume,
// so that a reconnect with unchanged state changes nothing
// (docs/design.md invariant 4).
//
// Ownership is the seam hub/replica uses: relayed streams from peer
// replicas, spoke moves, withdrawals a peer decided, and the holdings the
// replica set gossips; ReplicaSet is what the Store asks back. Relayed
// streams keep every rule above, so no replica failover shows a proxy a
// removal no spoke made (docs/design.md invariant 8).
package ingest
