package enroll

import (
	"context"
	"errors"
	"io/fs"
	"sort"
	"time"

	"github.com/navemesh/nave/hub/ingest"
)

// Known remembers the clusters that have synced with the hub, in every
// mode — with TLS and in plaintext mode, where nothing is enrolled — so
// that a restarted hub waits (ingest.startupGrace at most) for every
// cluster a mesh had before serving it (ingest.StoreOptions.Expected).
// Implementations must be safe for concurrent use, also across replicas.
type Known interface {
	// RememberCluster records that (mesh, cluster) synced; a cluster
	// already remembered keeps its first record.
	RememberCluster(ctx context.Context, mesh, cluster string) error
	// KnownClusters lists every cluster remembered, sorted.
	KnownClusters(ctx context.Context) ([]ingest.ClusterIdentity, error)
}

// knownRecord is what a remembered cluster's record holds.
type knownRecord struct {
	Mesh        string    `json:"mesh"`
	Cluster     string    `json:"cluster"`
	FirstSynced time.Time `json:"firstSynced"`
}

// RememberCluster implements Known: known/<mesh>.<cluster>.json, written
// once.
func (s *DirStore) RememberCluster(_ context.Context, mesh, cluster string) error {
	if err := validIdentity(mesh, cluster); err != nil {
		return err
	}
	var rec knownRecord
	err := s.readJSON(dirKnown, clusterFile(mesh, cluster), &rec)
	if err == nil {
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return s.writeJSON(dirKnown, clusterFile(mesh, cluster), knownRecord{Mesh: mesh, Cluster: cluster, FirstSynced: s.now().UTC()})
}

// KnownClusters implements Known: the file names decide.
func (s *DirStore) KnownClusters(context.Context) ([]ingest.ClusterIdentity, error) {
	names, err := s.list(dirKnown)
	if err != nil {
		return nil, err
	}
	out := make([]ingest.ClusterIdentity, 0, len(names))
	for _, n := range names {
		if mesh, cluster, ok := splitClusterFile(n); ok {
			out = append(out, ingest.ClusterIdentity{Mesh: mesh, Cluster: cluster})
		}
	}
	return out, nil
}

// RememberCluster implements Known: the Secret
// nave-enroll-known-<mesh>.<cluster>, created if absent.
func (s *SecretStore) RememberCluster(ctx context.Context, mesh, cluster string) error {
	if err := validIdentity(mesh, cluster); err != nil {
		return err
	}
	err := s.create(ctx, secretKnownPrefix+joinIdentity(mesh, cluster), labels(kindKnown, labelMesh, mesh, labelCluster, cluster), keyKnown,
		knownRecord{Mesh: mesh, Cluster: cluster, FirstSynced: s.now().UTC()})
	if errors.Is(err, errExists) {
		return nil
	}
	return err
}

// KnownClusters implements Known: the Secrets' names decide.
func (s *SecretStore) KnownClusters(ctx context.Context) ([]ingest.ClusterIdentity, error) {
	secs, err := s.list(ctx, labelKind+"="+kindKnown)
	if err != nil {
		return nil, err
	}
	out := make([]ingest.ClusterIdentity, 0, len(secs))
	for i := range secs {
		if mesh, cluster, ok := cutIdentity(secs[i].Name, secretKnownPrefix); ok {
			out = append(out, ingest.ClusterIdentity{Mesh: mesh, Cluster: cluster})
		}
	}
	sort.Slice(out, func(i, j int) bool { return identityLess(out[i].Mesh, out[i].Cluster, out[j].Mesh, out[j].Cluster) })
	return out, nil
}
