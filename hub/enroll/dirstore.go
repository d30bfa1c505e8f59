package enroll

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/navemesh/nave/shared/atomicfile"
)

// DirStore keeps the enrollment state in a directory:
//
//	tokens/<id>.json                pending (or expired) join tokens: SHA-256 of the secret,
//	                                mesh, cluster, creation and expiry times
//	used/<id>.json                  redeemed tokens, moved here from tokens/ by the redeemer
//	clusters/<mesh>.<cluster>.json  enrolled clusters: trust domain, newest certificate serial and expiry
//	revoked/<mesh>.<cluster>.json   revocations
//	known/<mesh>.<cluster>.json     clusters that synced with the hub, in every mode (Known)
//
// Mesh and cluster names are DNS labels, so the '.' in a file name is
// unambiguous. Every file is written to a temporary name and renamed into
// place, so readers never see half a file. A token is redeemed by renaming
// its file from tokens/ to used/: of several redeemers (hub replicas on a
// shared volume, goroutines) exactly one rename succeeds; the others find
// the file gone. That needs a file system whose rename is atomic (local
// file systems, NFS, most CSI volumes with ReadWriteMany).
//
// Hubs without a shared volume keep the same records in Kubernetes Secrets
// (SecretStore).
//
// DirStore is safe for concurrent use, also by several processes sharing
// the directory.
type DirStore struct {
	dir string
	now func() time.Time
}

var _ Store = (*DirStore)(nil)

const (
	dirTokens   = "tokens"
	dirUsed     = "used"
	dirClusters = "clusters"
	dirRevoked  = "revoked"
	dirKnown    = "known"
)

// StateSubdir is the subdirectory of the hub's state dir that holds the
// enrollment state.
const StateSubdir = "enroll"

// OpenStateDir opens the store in the hub's state dir (its StateSubdir).
// The hub and navectl both open it this way.
func OpenStateDir(stateDir string, opts ...Option) (*DirStore, error) {
	if stateDir == "" {
		return nil, errors.New("hub state dir: not set")
	}
	return OpenDir(filepath.Join(stateDir, StateSubdir), opts...)
}

// OpenDir opens (creating if needed, mode 0700) the store in dir.
func OpenDir(dir string, opts ...Option) (*DirStore, error) {
	if dir == "" {
		return nil, errors.New("enrollment state dir: not set")
	}
	s := &DirStore{dir: dir, now: newOptions(opts).now}
	for _, sub := range []string{dirTokens, dirUsed, dirClusters, dirRevoked, dirKnown} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, fmt.Errorf("enrollment state dir: %w", err)
		}
	}
	return s, nil
}

// Dir is the store's directory.
func (s *DirStore) Dir() string { return s.dir }

// CreateToken implements Tokens.
func (s *DirStore) CreateToken(ctx context.Context, mesh, cluster string, ttl time.Duration, namespaces ...string) (string, TokenInfo, error) {
	if err := checkTokenRequest(mesh, cluster, ttl, namespaces); err != nil {
		return "", TokenInfo{}, err
	}
	revoked, err := s.Revoked(ctx, mesh, cluster)
	if err != nil {
		return "", TokenInfo{}, err
	}
	if revoked {
		return "", TokenInfo{}, fmt.Errorf("%s/%s: %w", mesh, cluster, ErrRevoked)
	}
	secret, f, err := newTokenRecord(s.now(), mesh, cluster, ttl, namespaces)
	if err != nil {
		return "", TokenInfo{}, err
	}
	if err := s.writeJSON(dirTokens, f.ID+".json", f); err != nil {
		return "", TokenInfo{}, err
	}
	return secret, f.info(TokenPending), nil
}

// Redeem implements Tokens. The secret is checked before anything else is
// said about the token, so that only its holder learns that it was used
// or has expired.
func (s *DirStore) Redeem(_ context.Context, token string) (TokenInfo, error) {
	t, err := ParseToken(token)
	if err != nil {
		return TokenInfo{}, err
	}
	name := t.ID + ".json"
	var f tokenRecord
	switch err := s.readJSON(dirTokens, name, &f); {
	case errors.Is(err, fs.ErrNotExist):
		switch err := s.readJSON(dirUsed, name, &f); {
		case errors.Is(err, fs.ErrNotExist):
			return TokenInfo{}, fmt.Errorf("token %s: %w", t.ID, ErrTokenUnknown)
		case err != nil:
			return TokenInfo{}, err
		case !f.matches(t):
			return TokenInfo{}, fmt.Errorf("token %s: %w", t.ID, ErrTokenInvalid)
		}
		return TokenInfo{}, fmt.Errorf("token %s: %w", t.ID, ErrTokenUsed)
	case err != nil:
		return TokenInfo{}, err
	}
	if !f.matches(t) {
		return TokenInfo{}, fmt.Errorf("token %s: %w", t.ID, ErrTokenInvalid)
	}
	now := s.now()
	if !now.Before(f.ExpiresAt) {
		return TokenInfo{}, fmt.Errorf("token %s: %w (at %s)", t.ID, ErrTokenExpired, f.ExpiresAt.Format(time.RFC3339))
	}
	// The claim: of concurrent redeemers, exactly one rename succeeds.
	used := filepath.Join(s.dir, dirUsed, name)
	if err := os.Rename(filepath.Join(s.dir, dirTokens, name), used); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return TokenInfo{}, fmt.Errorf("token %s: %w", t.ID, ErrTokenUsed)
		}
		return TokenInfo{}, fmt.Errorf("redeem token %s: %w", t.ID, err)
	}
	// The file's modification time records when it was used. Failing to
	// set it loses only that: the token is consumed either way.
	_ = os.Chtimes(used, now, now)
	info := f.info(TokenUsed)
	at := now.UTC()
	info.UsedAt = &at
	return info, nil
}

// ListTokens implements Tokens, sorted by creation time.
func (s *DirStore) ListTokens(context.Context) ([]TokenInfo, error) {
	var out []TokenInfo
	now := s.now()
	for _, sub := range []string{dirTokens, dirUsed} {
		names, err := s.list(sub)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			var f tokenRecord
			if err := s.readJSON(sub, n, &f); err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					continue // redeemed while listing
				}
				return nil, err
			}
			state := TokenPending
			if !now.Before(f.ExpiresAt) {
				state = TokenExpired
			}
			info := f.info(state)
			if sub == dirUsed {
				info.State = TokenUsed
				if st, err := os.Stat(filepath.Join(s.dir, sub, n)); err == nil {
					at := st.ModTime().UTC()
					info.UsedAt = &at
				}
			}
			out = append(out, info)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

func clusterFile(mesh, cluster string) string { return joinIdentity(mesh, cluster) + ".json" }

// splitClusterFile is clusterFile's inverse; ok is false for names that
// are not of that form (temporary files, strays).
func splitClusterFile(name string) (mesh, cluster string, ok bool) {
	base, found := strings.CutSuffix(name, ".json")
	if !found {
		return "", "", false
	}
	return splitIdentity(base)
}

// RecordCluster implements Registry.
func (s *DirStore) RecordCluster(_ context.Context, c ClusterRecord) error {
	if err := validIdentity(c.Mesh, c.Cluster); err != nil {
		return err
	}
	return s.writeJSON(dirClusters, clusterFile(c.Mesh, c.Cluster), c)
}

// Cluster implements Registry.
func (s *DirStore) Cluster(_ context.Context, mesh, cluster string) (ClusterRecord, error) {
	if err := validIdentity(mesh, cluster); err != nil {
		return ClusterRecord{}, err
	}
	var c ClusterRecord
	err := s.readJSON(dirClusters, clusterFile(mesh, cluster), &c)
	if errors.Is(err, fs.ErrNotExist) {
		return ClusterRecord{}, fmt.Errorf("%s/%s: %w", mesh, cluster, ErrNotEnrolled)
	}
	return c, err
}

// Clusters implements Registry, sorted by mesh and cluster.
func (s *DirStore) Clusters(context.Context) ([]ClusterRecord, error) {
	names, err := s.list(dirClusters)
	if err != nil {
		return nil, err
	}
	out := make([]ClusterRecord, 0, len(names))
	for _, n := range names {
		if _, _, ok := splitClusterFile(n); !ok {
			continue
		}
		var c ClusterRecord
		if err := s.readJSON(dirClusters, n, &c); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return identityLess(out[i].Mesh, out[i].Cluster, out[j].Mesh, out[j].Cluster) })
	return out, nil
}

// Meshes implements Registry, sorted; it reads only file names.
func (s *DirStore) Meshes(context.Context) ([]string, error) {
	names, err := s.list(dirClusters)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, n := range names {
		if m, _, ok := splitClusterFile(n); ok && !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Revoke implements Registry. Revoking a revoked cluster keeps the first
// revocation's time.
func (s *DirStore) Revoke(ctx context.Context, mesh, cluster string) error {
	if err := validIdentity(mesh, cluster); err != nil {
		return err
	}
	if ok, err := s.Revoked(ctx, mesh, cluster); err != nil || ok {
		return err
	}
	return s.writeJSON(dirRevoked, clusterFile(mesh, cluster), Revocation{Mesh: mesh, Cluster: cluster, RevokedAt: s.now().UTC()})
}

// Revoked implements Registry. An error other than "no such file" is
// returned, never taken for "not revoked".
func (s *DirStore) Revoked(_ context.Context, mesh, cluster string) (bool, error) {
	if err := validIdentity(mesh, cluster); err != nil {
		return false, err
	}
	_, err := os.Stat(filepath.Join(s.dir, dirRevoked, clusterFile(mesh, cluster)))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	default:
		return false, fmt.Errorf("revocation of %s/%s: %w", mesh, cluster, err)
	}
}

// Revocations implements Registry, sorted by mesh and cluster.
func (s *DirStore) Revocations(context.Context) ([]Revocation, error) {
	names, err := s.list(dirRevoked)
	if err != nil {
		return nil, err
	}
	out := make([]Revocation, 0, len(names))
	for _, n := range names {
		mesh, cluster, ok := splitClusterFile(n)
		if !ok {
			continue
		}
		r := Revocation{Mesh: mesh, Cluster: cluster}
		if err := s.readJSON(dirRevoked, n, &r); err != nil {
			return nil, err
		}
		// The file name decides which cluster is revoked, whatever the
		// content says.
		r.Mesh, r.Cluster = mesh, cluster
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return identityLess(out[i].Mesh, out[i].Cluster, out[j].Mesh, out[j].Cluster) })
	return out, nil
}

// list returns the names of sub's files, sorted, without dot-files (the
// temporary files of writes in progress).
func (s *DirStore) list(sub string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(s.dir, sub))
	if err != nil {
		return nil, fmt.Errorf("enrollment state: %w", err)
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() && !strings.HasPrefix(e.Name(), atomicfile.TempPrefix) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

func (s *DirStore) readJSON(sub, name string, v any) error {
	p := filepath.Join(s.dir, sub, name)
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	return nil
}

// writeJSON writes v to sub/name atomically (temporary file, fsync,
// rename, fsync of the directory), mode 0600.
func (s *DirStore) writeJSON(sub, name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(s.dir, sub, name), append(b, '\n'), 0o600)
}
