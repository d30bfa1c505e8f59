// Package enroll admits spoke clusters to the hub and keeps them
// accountable: one-time join tokens, the Enrollment gRPC service that
// trades a token (later, the current certificate) for a client
// certificate bound to one (mesh, cluster), the authenticator that turns
// that certificate back into an ingest.ClusterIdentity, and revocation, which
// refuses a cluster's renewals and closes its open streams.
//
// State (tokens, enrolled clusters, revocations) lives behind the Store
// interface so that every hub replica shares it: DirStore keeps it in a
// directory (the hub's state dir, on a volume the replicas share),
// SecretStore in Kubernetes Secrets (replicas share the API server;
// OpenStore opens either). The certificate authority is behind Signer.
package enroll

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/shared/spiffeid"
)

// MaxTokenTTL bounds how long a join token may stay valid.
const MaxTokenTTL = 7 * 24 * time.Hour

// ErrNotEnrolled is returned by Registry.Cluster for a cluster that has
// never enrolled.
var ErrNotEnrolled = errors.New("cluster is not enrolled")

// ErrRevoked refuses a token for, or an enrollment of, a revoked cluster.
var ErrRevoked = errors.New("cluster is revoked")

// TokenState is where a join token is in its life.
type TokenState string

// Token states.
const (
	TokenPending TokenState = "pending"
	TokenExpired TokenState = "expired"
	TokenUsed    TokenState = "used"
)

// TokenInfo describes a join token; it never holds the secret nor its hash.
type TokenInfo struct {
	ID        string     `json:"id"`
	Mesh      string     `json:"mesh"`
	Cluster   string     `json:"cluster"`
	CreatedAt time.Time  `json:"createdAt"`
	ExpiresAt time.Time  `json:"expiresAt"`
	State     TokenState `json:"state"`
	// Namespaces scope the cluster's registration authority; none: any.
	Namespaces []string `json:"namespaces,omitempty"`
	// UsedAt is set for used tokens, when the store knows it.
	UsedAt *time.Time `json:"usedAt,omitempty"`
}

// Identity is the (mesh, cluster) the token admits.
func (t TokenInfo) Identity() ingest.ClusterIdentity {
	return ingest.ClusterIdentity{Mesh: t.Mesh, Cluster: t.Cluster}
}

// ClusterRecord is an enrolled cluster and its newest certificate.
type ClusterRecord struct {
	Mesh        string    `json:"mesh"`
	Cluster     string    `json:"cluster"`
	TrustDomain string    `json:"trustDomain"`
	Serial      string    `json:"serial"` // hex
	NotAfter    time.Time `json:"notAfter"`
	EnrolledAt  time.Time `json:"enrolledAt"`
	RenewedAt   time.Time `json:"renewedAt,omitzero"`
	// TokenID names the join token the cluster enrolled with.
	TokenID string `json:"tokenID"`
	// Namespaces are the only namespaces whose workload certificates the
	// cluster may obtain as registration authority (from its join token);
	// none means any namespace of its mesh.
	Namespaces []string `json:"namespaces,omitempty"`
}

// Identity is the record's (mesh, cluster).
func (c ClusterRecord) Identity() ingest.ClusterIdentity {
	return ingest.ClusterIdentity{Mesh: c.Mesh, Cluster: c.Cluster}
}

// Revocation is a cluster cut off from the hub.
type Revocation struct {
	Mesh      string    `json:"mesh"`
	Cluster   string    `json:"cluster"`
	RevokedAt time.Time `json:"revokedAt"`
}

// Identity is the revoked (mesh, cluster).
func (r Revocation) Identity() ingest.ClusterIdentity {
	return ingest.ClusterIdentity{Mesh: r.Mesh, Cluster: r.Cluster}
}

// Tokens issues and redeems one-time join tokens. Implementations must be
// safe for concurrent use, also by several hub replicas and navectl at
// once: a token is redeemed at most once across all of them.
type Tokens interface {
	// CreateToken returns a new token for (mesh, cluster), valid for ttl.
	// The returned string is the only copy of the secret. A revoked
	// cluster gets no token (ErrRevoked).
	// With namespaces, the cluster may obtain workload certificates (as
	// its workloads' registration authority) only in those namespaces.
	CreateToken(ctx context.Context, mesh, cluster string, ttl time.Duration, namespaces ...string) (token string, info TokenInfo, err error)
	// Redeem consumes token. It fails with an error wrapping one of
	// ErrTokenMalformed, ErrTokenUnknown, ErrTokenInvalid, ErrTokenUsed,
	// ErrTokenExpired; any other error is the store's.
	Redeem(ctx context.Context, token string) (TokenInfo, error)
	// ListTokens lists every token, pending, expired or used.
	ListTokens(ctx context.Context) ([]TokenInfo, error)
}

// Registry records enrolled clusters and revocations. Implementations must
// be safe for concurrent use, also across hub replicas.
type Registry interface {
	// RecordCluster creates or replaces the record of an enrolled cluster.
	RecordCluster(ctx context.Context, rec ClusterRecord) error
	// Cluster returns a cluster's record, or an error wrapping
	// ErrNotEnrolled.
	Cluster(ctx context.Context, mesh, cluster string) (ClusterRecord, error)
	// Clusters lists every enrolled cluster.
	Clusters(ctx context.Context) ([]ClusterRecord, error)
	// Meshes lists the meshes that have an enrolled cluster.
	Meshes(ctx context.Context) ([]string, error)
	// Revoke cuts (mesh, cluster) off for good: no token, enrollment,
	// renewal or stream is accepted for it afterwards.
	Revoke(ctx context.Context, mesh, cluster string) error
	// Revoked reports whether (mesh, cluster) is revoked. It reads the
	// shared state, so a revocation by another replica counts at once.
	Revoked(ctx context.Context, mesh, cluster string) (bool, error)
	// Revocations lists every revoked cluster.
	Revocations(ctx context.Context) ([]Revocation, error)
	// PurgeMesh deletes everything kept of mesh: its join tokens (pending
	// and used), enrolled clusters, revocations and known clusters
	// (Known) — for a deleted mesh,
	// whose name a new mesh may take without inheriting any of it.
	PurgeMesh(ctx context.Context, mesh string) error
}

// Store is the whole enrollment state, and the clusters that synced with
// the hub (Known), kept beside it in state.store.
type Store interface {
	Tokens
	Registry
	Known
}

// Option configures a Store.
type Option func(*options)

type options struct{ now func() time.Time }

func newOptions(opts []Option) options {
	o := options{now: time.Now}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// WithClock makes the store read time from now (tests expire tokens with it).
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// tokenRecord is what a store keeps of a join token: its info and its
// secret's hash, as JSON.
type tokenRecord struct {
	ID           string    `json:"id"`
	Mesh         string    `json:"mesh"`
	Cluster      string    `json:"cluster"`
	CreatedAt    time.Time `json:"createdAt"`
	ExpiresAt    time.Time `json:"expiresAt"`
	SecretSHA256 string    `json:"secretSHA256"` // hex
	Namespaces   []string  `json:"namespaces,omitempty"`
}

// checkTokenRequest checks what CreateToken is asked for.
func checkTokenRequest(mesh, cluster string, ttl time.Duration, namespaces []string) error {
	if err := validIdentity(mesh, cluster); err != nil {
		return err
	}
	for _, ns := range namespaces {
		if err := spiffeid.ValidateName(ns); err != nil {
			return fmt.Errorf("namespace %q: %w", ns, err)
		}
	}
	if ttl <= 0 || ttl > MaxTokenTTL {
		return fmt.Errorf("token ttl %s: must be greater than 0 and at most %s", ttl, MaxTokenTTL)
	}
	return nil
}

// newTokenRecord makes a fresh token for a checked request: the secret
// (its only copy) and the record to store.
func newTokenRecord(now time.Time, mesh, cluster string, ttl time.Duration, namespaces []string) (string, tokenRecord, error) {
	secret, t, err := newToken()
	if err != nil {
		return "", tokenRecord{}, err
	}
	now = now.UTC()
	return secret, tokenRecord{ID: t.ID, Mesh: mesh, Cluster: cluster, CreatedAt: now, ExpiresAt: now.Add(ttl),
		SecretSHA256: hex.EncodeToString(t.hash()), Namespaces: slices.Sorted(slices.Values(namespaces))}, nil
}

func (f tokenRecord) info(state TokenState) TokenInfo {
	return TokenInfo{ID: f.ID, Mesh: f.Mesh, Cluster: f.Cluster, CreatedAt: f.CreatedAt, ExpiresAt: f.ExpiresAt, State: state,
		Namespaces: f.Namespaces}
}

func (f tokenRecord) matches(t Token) bool {
	h, err := hex.DecodeString(f.SecretSHA256)
	return err == nil && t.ID == f.ID && t.matches(h)
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

// joinIdentity names (mesh, cluster) as "mesh.cluster": both are DNS
// labels, so the '.' is unambiguous. splitIdentity is its inverse; ok is
// false for anything else.
func joinIdentity(mesh, cluster string) string { return mesh + "." + cluster }

func splitIdentity(s string) (mesh, cluster string, ok bool) {
	mesh, cluster, found := strings.Cut(s, ".")
	if !found || validIdentity(mesh, cluster) != nil {
		return "", "", false
	}
	return mesh, cluster, true
}

func identityLess(m1, c1, m2, c2 string) bool {
	if m1 != m2 {
		return m1 < m2
	}
	return c1 < c2
}
