package enroll

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/navemesh/nave/shared/atomicfile"
	"github.com/navemesh/nave/shared/spiffeid"
)

// MaxTokenTTL bounds how long a join token may stay valid.
const MaxTokenTTL = 7 * 24 * time.Hour

// DirStore keeps the enrollment state in a directory:
//
//	tokens/<id>.json                pending (or expired) join tokens: SHA-256 of the secret,
//	                                mesh, cluster, creation and expiry times
//	used/<id>.json                  redeemed tokens, moved here from tokens/ by the redeemer
//	clusters/<mesh>.<cluster>.json  enrolled clusters: trust domain, newest certificate serial and expiry
//	revoked/<mesh>.<cluster>.json   revocations
//
// Mesh and cluster names are DNS labels, so the '.' in a file name is
// unambiguous. Every file is written to a temporary name and renamed into
// place, so readers never see half a file. A token is redeemed by renaming
// its file from tokens/ to used/: of several redeemers (hub replicas on a
// shared volume, goroutines) exactly one rename succeeds; the others find
// the file gone. That needs a file system whose rename is atomic (local
// file systems, NFS, most CSI volumes with ReadWriteMany).
//
// A store for hubs without a shared volume could keep the same records in
// Kubernetes Secrets (tokens, their hash being a credential) and a
// ConfigMap or Secrets (clusters, revocations), redeeming with a delete
// preconditioned on the token Secret's UID and resourceVersion, which the
// API server grants to exactly one caller.
//
// DirStore is safe for concurrent use, also by several processes sharing
// the directory.
type DirStore struct {
	dir string
	now func() time.Time
}

var _ Store = (*DirStore)(nil)

// DirOption configures a DirStore.
type DirOption func(*DirStore)

// WithClock makes the store read time from now (tests expire tokens with it).
func WithClock(now func() time.Time) DirOption { return func(s *DirStore) { s.now = now } }

const (
	dirTokens   = "tokens"
	dirUsed     = "used"
	dirClusters = "clusters"
	dirRevoked  = "revoked"
)

// StateSubdir is the subdirectory of the hub's state dir that holds the
// enrollment state.
const StateSubdir = "enroll"

// OpenStateDir opens the store in the hub's state dir (its StateSubdir).
// The hub and navectl both open it this way.
func OpenStateDir(stateDir string, opts ...DirOption) (*DirStore, error) {
	if stateDir == "" {
		return nil, errors.New("hub state dir: not set")
	}
	return OpenDir(filepath.Join(stateDir, StateSubdir), opts...)
}

// OpenDir opens (creating if needed, mode 0700) the store in dir.
func OpenDir(dir string, opts ...DirOption) (*DirStore, error) {
	if dir == "" {
		return nil, errors.New("enrollment state dir: not set")
	}
	s := &DirStore{dir: dir, now: time.Now}
	for _, o := range opts {
		o(s)
	}
	for _, sub := range []string{dirTokens, dirUsed, dirClusters, dirRevoked} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, fmt.Errorf("enrollment state dir: %w", err)
		}
	}
	return s, nil
}

// Dir is the store's directory.
func (s *DirStore) Dir() string { return s.dir }

// tokenFile is a token's file: its info and its secret's hash.
type tokenFile struct {
	ID           string    `json:"id"`
	Mesh         string    `json:"mesh"`
	Cluster      string    `json:"cluster"`
	CreatedAt    time.Time `json:"createdAt"`
	ExpiresAt    time.Time `json:"expiresAt"`
	SecretSHA256 string    `json:"secretSHA256"` // hex
	Namespaces   []string  `json:"namespaces,omitempty"`
}

func (f tokenFile) info(state TokenState) TokenInfo {
	return TokenInfo{ID: f.ID, Mesh: f.Mesh, Cluster: f.Cluster, CreatedAt: f.CreatedAt, ExpiresAt: f.ExpiresAt, State: state,
		Namespaces: f.Namespaces}
}

func validIdentity(mesh, cluster string) error {
	if !spiffeid.ValidName(mesh) {
		return fmt.Errorf("mesh %q is not a DNS label", mesh)
	}
	if !spiffeid.ValidName(cluster) {
		return fmt.Errorf("cluster %q is not a DNS label", cluster)
	}
	return nil
}

// CreateToken implements Tokens.
func (s *DirStore) CreateToken(ctx context.Context, mesh, cluster string, ttl time.Duration, namespaces ...string) (string, TokenInfo, error) {
	if err := validIdentity(mesh, cluster); err != nil {
		return "", TokenInfo{}, err
	}
	for _, ns := range namespaces {
		if err := spiffeid.ValidateName(ns); err != nil {
			return "", TokenInfo{}, fmt.Errorf("namespace %q: %w", ns, err)
		}
	}
	if ttl <= 0 || ttl > MaxTokenTTL {
		return "", TokenInfo{}, fmt.Errorf("token ttl %s: must be greater than 0 and at most %s", ttl, MaxTokenTTL)
	}
	revoked, err := s.Revoked(ctx, mesh, cluster)
	if err != nil {
		return "", TokenInfo{}, err
	}
	if revoked {
		return "", TokenInfo{}, fmt.Errorf("%s/%s: %w", mesh, cluster, ErrRevoked)
	}
	secret, t, err := newToken()
	if err != nil {
		return "", TokenInfo{}, err
	}
	now := s.now().UTC()
	f := tokenFile{ID: t.ID, Mesh: mesh, Cluster: cluster, CreatedAt: now, ExpiresAt: now.Add(ttl),
		SecretSHA256: hex.EncodeToString(t.hash()), Namespaces: slices.Sorted(slices.Values(namespaces))}
	if err := s.writeJSON(dirTokens, t.ID+".json", f); err != nil {
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
	var f tokenFile
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

func (f tokenFile) matches(t Token) bool {
	h, err := hex.DecodeString(f.SecretSHA256)
	return err == nil && t.ID == f.ID && t.matches(h)
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
			var f tokenFile
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

func clusterFile(mesh, cluster string) string { return mesh + "." + cluster + ".json" }

// splitClusterFile is clusterFile's inverse; ok is false for names that
// are not of that form (temporary files, strays).
func splitClusterFile(name string) (mesh, cluster string, ok bool) {
	base, found := strings.CutSuffix(name, ".json")
	if !found {
		return "", "", false
	}
	mesh, cluster, found = strings.Cut(base, ".")
	if !found || validIdentity(mesh, cluster) != nil {
		return "", "", false
	}
	return mesh, cluster, true
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

func identityLess(m1, c1, m2, c2 string) bool {
	if m1 != m2 {
		return m1 < m2
	}
	return c1 < c2
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
