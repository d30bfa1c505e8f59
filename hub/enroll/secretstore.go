package enroll

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/shared/spiffeid"
)

// The Secrets a SecretStore keeps in its namespace. Mesh and cluster names
// are DNS labels, so "<mesh>.<cluster>" is unambiguous and every name is a
// valid Secret name.
const (
	// secretTokenPrefix + id: a join token (its record, key keyToken);
	// immutable.
	secretTokenPrefix = "nave-enroll-token-"
	// secretTokenPrefix + id + secretUsedSuffix: the token's use (key
	// keyUsed); whoever creates it has redeemed the token. Immutable.
	secretUsedSuffix = "-used"
	// secretClusterPrefix + mesh.cluster: an enrolled cluster (key
	// keyCluster), replaced at every renewal.
	secretClusterPrefix = "nave-enroll-cluster-"
	// secretRevokedPrefix + mesh.cluster: a revocation (key keyRevoked);
	// immutable, deleted only with its mesh (PurgeMesh).
	secretRevokedPrefix = "nave-enroll-revoked-"
	// secretMeshPrefix + mesh: the mesh has (had) an enrolled cluster; no
	// data. Immutable.
	secretMeshPrefix = "nave-enroll-mesh-"
	// secretKnownPrefix + mesh.cluster: a cluster that synced with the
	// hub, in any mode (key keyKnown; Known). Immutable.
	secretKnownPrefix = "nave-enroll-known-"

	keyToken   = "token.json"
	keyUsed    = "used.json"
	keyCluster = "cluster.json"
	keyRevoked = "revocation.json"
	keyKnown   = "known.json"

	// labelKind says which of the above a Secret is; the lists select by it.
	labelKind    = "nave.io/enroll"
	kindToken    = "token"
	kindUsed     = "token-used"
	kindCluster  = "cluster"
	kindRevoked  = "revocation"
	kindMesh     = "mesh"
	kindKnown    = "known"
	labelMesh    = "nave.io/mesh"
	labelCluster = "nave.io/cluster"
	labelTokenID = "nave.io/token"
)

// SecretStore keeps the enrollment state in Kubernetes Secrets of one
// namespace, for hub replicas that share an API server and no volume:
//
//	nave-enroll-token-<id>                 a join token: SHA-256 of the secret, mesh, cluster,
//	                                       creation and expiry times (immutable)
//	nave-enroll-token-<id>-used            its use, when it was redeemed (immutable)
//	nave-enroll-cluster-<mesh>.<cluster>   an enrolled cluster: trust domain, newest certificate
//	nave-enroll-revoked-<mesh>.<cluster>   a revocation (immutable)
//	nave-enroll-mesh-<mesh>                a mesh with enrolled clusters (no data)
//	nave-enroll-known-<mesh>.<cluster>     a cluster that synced with the hub, in any mode (Known; immutable)
//
// Each is labelled nave.io/enroll=<kind> so that a list reads only its
// kind. Single use across replicas is the API server's: a token is
// redeemed by creating its -used Secret, and of several redeemers exactly
// one create succeeds — the others get AlreadyExists and are told the
// token was used. The token's own Secret never changes. Revocations and
// meshes are created if absent; a cluster's record is replaced (last
// writer wins, as a DirStore's rename). Nothing is deleted but a deleted
// mesh's Secrets (PurgeMesh). The hub needs get, create, update (cluster
// records), list (navectl's listings, the Enforcer's revocations, Meshes)
// and delete (PurgeMesh) on secrets in the namespace: deploy/hub/rbac.yaml;
// docs/decisions/011-state-in-secrets.md.
//
// A Secret whose data is not what nave wrote (a hand-made one, a missing
// key, garbage) is refused with an error naming it and what is wrong.
// Existence alone decides that a cluster is revoked or a token used,
// whatever the content says.
//
// SecretStore is safe for concurrent use, also by several processes
// sharing the namespace.
type SecretStore struct {
	client    ca.SecretClient
	namespace string
	now       func() time.Time
}

var _ Store = (*SecretStore)(nil)

// NewSecretStore returns a SecretStore keeping Secrets in namespace through
// client.
func NewSecretStore(client ca.SecretClient, namespace string, opts ...Option) *SecretStore {
	return &SecretStore{client: client, namespace: namespace, now: newOptions(opts).now}
}

func tokenSecret(id string) string { return secretTokenPrefix + id }
func usedSecret(id string) string  { return secretTokenPrefix + id + secretUsedSuffix }
func clusterSecret(mesh, cluster string) string {
	return secretClusterPrefix + joinIdentity(mesh, cluster)
}
func revokedSecret(mesh, cluster string) string {
	return secretRevokedPrefix + joinIdentity(mesh, cluster)
}

func labels(kind string, kv ...string) map[string]string {
	l := map[string]string{
		"app.kubernetes.io/part-of":    "nave",
		"app.kubernetes.io/managed-by": "nave-hub",
		labelKind:                      kind,
	}
	for i := 0; i+1 < len(kv); i += 2 {
		l[kv[i]] = kv[i+1]
	}
	return l
}

// CreateToken implements Tokens.
func (s *SecretStore) CreateToken(ctx context.Context, mesh, cluster string, ttl time.Duration, namespaces ...string) (string, TokenInfo, error) {
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
	secret, rec, err := newTokenRecord(s.now(), mesh, cluster, ttl, namespaces)
	if err != nil {
		return "", TokenInfo{}, err
	}
	err = s.create(ctx, tokenSecret(rec.ID), labels(kindToken, labelMesh, mesh, labelCluster, cluster), keyToken, rec)
	if err != nil {
		return "", TokenInfo{}, err
	}
	return secret, rec.info(TokenPending), nil
}

// usedRecord is what the -used Secret of a token holds.
type usedRecord struct {
	ID     string    `json:"id"`
	UsedAt time.Time `json:"usedAt"`
}

// Redeem implements Tokens. As with a DirStore, the secret is checked
// before anything else is said about the token.
func (s *SecretStore) Redeem(ctx context.Context, token string) (TokenInfo, error) {
	t, err := ParseToken(token)
	if err != nil {
		return TokenInfo{}, err
	}
	sec, err := s.client.Get(ctx, s.namespace, tokenSecret(t.ID))
	if apierrors.IsNotFound(err) {
		return TokenInfo{}, fmt.Errorf("token %s: %w", t.ID, ErrTokenUnknown)
	}
	if err != nil {
		return TokenInfo{}, s.apiError("get", tokenSecret(t.ID), err)
	}
	rec, err := s.tokenRecord(sec)
	if err != nil {
		return TokenInfo{}, err
	}
	if !rec.matches(t) {
		return TokenInfo{}, fmt.Errorf("token %s: %w", t.ID, ErrTokenInvalid)
	}
	now := s.now()
	if !now.Before(rec.ExpiresAt) {
		// Used before it expired, or not: only the holder learns which.
		_, err := s.client.Get(ctx, s.namespace, usedSecret(t.ID))
		switch {
		case err == nil:
			return TokenInfo{}, fmt.Errorf("token %s: %w", t.ID, ErrTokenUsed)
		case !apierrors.IsNotFound(err):
			return TokenInfo{}, s.apiError("get", usedSecret(t.ID), err)
		}
		return TokenInfo{}, fmt.Errorf("token %s: %w (at %s)", t.ID, ErrTokenExpired, rec.ExpiresAt.Format(time.RFC3339))
	}
	// The claim: of concurrent redeemers, exactly one create succeeds.
	at := now.UTC()
	err = s.create(ctx, usedSecret(t.ID), labels(kindUsed, labelTokenID, t.ID), keyUsed, usedRecord{ID: t.ID, UsedAt: at})
	if errors.Is(err, errExists) {
		return TokenInfo{}, fmt.Errorf("token %s: %w", t.ID, ErrTokenUsed)
	}
	if err != nil {
		return TokenInfo{}, fmt.Errorf("redeem token %s: %w", t.ID, err)
	}
	info := rec.info(TokenUsed)
	info.UsedAt = &at
	return info, nil
}

// tokenRecord decodes and checks a token's Secret.
func (s *SecretStore) tokenRecord(sec *ca.Secret) (tokenRecord, error) {
	var rec tokenRecord
	if err := s.decode(sec, keyToken, &rec); err != nil {
		return rec, err
	}
	id := strings.TrimPrefix(sec.Name, secretTokenPrefix)
	h, herr := hex.DecodeString(rec.SecretSHA256)
	switch {
	case rec.ID != id:
		return rec, s.dataError(sec, keyToken, "id %q, but the Secret is named for token %q", rec.ID, id)
	case validIdentity(rec.Mesh, rec.Cluster) != nil:
		return rec, s.dataError(sec, keyToken, "%v", validIdentity(rec.Mesh, rec.Cluster))
	case herr != nil || len(h) != secretHashLen:
		return rec, s.dataError(sec, keyToken, "secretSHA256 is not %d hex digits", 2*secretHashLen)
	case rec.ExpiresAt.IsZero():
		return rec, s.dataError(sec, keyToken, "no expiresAt")
	}
	return rec, nil
}

// ListTokens implements Tokens, sorted by creation time.
func (s *SecretStore) ListTokens(ctx context.Context) ([]TokenInfo, error) {
	secs, err := s.list(ctx, labelKind+" in ("+kindToken+","+kindUsed+")")
	if err != nil {
		return nil, err
	}
	used := map[string]time.Time{}
	for i := range secs {
		id, ok := strings.CutSuffix(strings.TrimPrefix(secs[i].Name, secretTokenPrefix), secretUsedSuffix)
		if secs[i].Labels[labelKind] != kindUsed || !ok || !validID(id) {
			continue
		}
		// When it was used is informative; that it was used is the
		// Secret's existence.
		var u usedRecord
		if s.decode(&secs[i], keyUsed, &u) != nil || u.UsedAt.IsZero() {
			u.UsedAt = secs[i].Created
		}
		used[id] = u.UsedAt.UTC()
	}
	var out []TokenInfo
	now := s.now()
	for i := range secs {
		id, ok := strings.CutPrefix(secs[i].Name, secretTokenPrefix)
		if secs[i].Labels[labelKind] != kindToken || !ok || !validID(id) {
			continue
		}
		rec, err := s.tokenRecord(&secs[i])
		if err != nil {
			return nil, err
		}
		info := rec.info(TokenPending)
		if !now.Before(rec.ExpiresAt) {
			info.State = TokenExpired
		}
		if at, ok := used[id]; ok {
			info.State, info.UsedAt = TokenUsed, &at
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// RecordCluster implements Registry. The record is replaced (an update
// without precondition: the newest certificate wins, as with a DirStore);
// the first one is created, after the mesh's Secret.
func (s *SecretStore) RecordCluster(ctx context.Context, c ClusterRecord) error {
	if err := validIdentity(c.Mesh, c.Cluster); err != nil {
		return err
	}
	sec, err := s.secret(clusterSecret(c.Mesh, c.Cluster), labels(kindCluster, labelMesh, c.Mesh, labelCluster, c.Cluster), keyCluster, c)
	if err != nil {
		return err
	}
	// Renewals find the record: one request.
	err = s.client.Update(ctx, sec)
	if !apierrors.IsNotFound(err) {
		if err != nil {
			return s.apiError("update", sec.Name, err)
		}
		return nil
	}
	if err := s.create(ctx, secretMeshPrefix+c.Mesh, labels(kindMesh, labelMesh, c.Mesh), "", nil); err != nil && !errors.Is(err, errExists) {
		return err
	}
	switch err := s.client.Create(ctx, sec); {
	case err == nil:
		return nil
	case apierrors.IsAlreadyExists(err):
		// Another replica created it meanwhile: replace it.
		if err := s.client.Update(ctx, sec); err != nil {
			return s.apiError("update", sec.Name, err)
		}
		return nil
	default:
		return s.apiError("create", sec.Name, err)
	}
}

// Cluster implements Registry.
func (s *SecretStore) Cluster(ctx context.Context, mesh, cluster string) (ClusterRecord, error) {
	if err := validIdentity(mesh, cluster); err != nil {
		return ClusterRecord{}, err
	}
	name := clusterSecret(mesh, cluster)
	sec, err := s.client.Get(ctx, s.namespace, name)
	if apierrors.IsNotFound(err) {
		return ClusterRecord{}, fmt.Errorf("%s/%s: %w", mesh, cluster, ErrNotEnrolled)
	}
	if err != nil {
		return ClusterRecord{}, s.apiError("get", name, err)
	}
	return s.clusterRecord(sec, mesh, cluster)
}

// clusterRecord decodes a cluster's Secret and checks that it is the
// record of (mesh, cluster), which its name says.
func (s *SecretStore) clusterRecord(sec *ca.Secret, mesh, cluster string) (ClusterRecord, error) {
	var c ClusterRecord
	if err := s.decode(sec, keyCluster, &c); err != nil {
		return ClusterRecord{}, err
	}
	if c.Mesh != mesh || c.Cluster != cluster {
		return ClusterRecord{}, s.dataError(sec, keyCluster, "holds the record of %s/%s, but the Secret is named for %s/%s", c.Mesh, c.Cluster, mesh, cluster)
	}
	return c, nil
}

// Clusters implements Registry, sorted by mesh and cluster.
func (s *SecretStore) Clusters(ctx context.Context) ([]ClusterRecord, error) {
	secs, err := s.list(ctx, labelKind+"="+kindCluster)
	if err != nil {
		return nil, err
	}
	out := make([]ClusterRecord, 0, len(secs))
	for i := range secs {
		mesh, cluster, ok := cutIdentity(secs[i].Name, secretClusterPrefix)
		if !ok {
			continue
		}
		c, err := s.clusterRecord(&secs[i], mesh, cluster)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return identityLess(out[i].Mesh, out[i].Cluster, out[j].Mesh, out[j].Cluster) })
	return out, nil
}

// Meshes implements Registry, sorted; it reads only the mesh Secrets'
// names.
func (s *SecretStore) Meshes(ctx context.Context) ([]string, error) {
	secs, err := s.list(ctx, labelKind+"="+kindMesh)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, sec := range secs {
		if m, ok := strings.CutPrefix(sec.Name, secretMeshPrefix); ok && spiffeid.ValidName(m) {
			out = append(out, m)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Revoke implements Registry: it creates the revocation's Secret if there
// is none, so the first revocation's time stays.
func (s *SecretStore) Revoke(ctx context.Context, mesh, cluster string) error {
	if err := validIdentity(mesh, cluster); err != nil {
		return err
	}
	err := s.create(ctx, revokedSecret(mesh, cluster), labels(kindRevoked, labelMesh, mesh, labelCluster, cluster), keyRevoked,
		Revocation{Mesh: mesh, Cluster: cluster, RevokedAt: s.now().UTC()})
	if errors.Is(err, errExists) {
		return nil
	}
	return err
}

// Revoked implements Registry: the revocation's Secret exists, whatever
// it holds. An error other than NotFound is returned, never taken for
// "not revoked".
func (s *SecretStore) Revoked(ctx context.Context, mesh, cluster string) (bool, error) {
	if err := validIdentity(mesh, cluster); err != nil {
		return false, err
	}
	name := revokedSecret(mesh, cluster)
	_, err := s.client.Get(ctx, s.namespace, name)
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	default:
		return false, fmt.Errorf("revocation of %s/%s: %w", mesh, cluster, s.apiError("get", name, err))
	}
}

// Revocations implements Registry, sorted by mesh and cluster. The
// Secret's name decides which cluster is revoked; its time is the
// record's, else when the Secret was created.
func (s *SecretStore) Revocations(ctx context.Context) ([]Revocation, error) {
	secs, err := s.list(ctx, labelKind+"="+kindRevoked)
	if err != nil {
		return nil, err
	}
	out := make([]Revocation, 0, len(secs))
	for i := range secs {
		mesh, cluster, ok := cutIdentity(secs[i].Name, secretRevokedPrefix)
		if !ok {
			continue
		}
		var r Revocation
		if s.decode(&secs[i], keyRevoked, &r) != nil || r.RevokedAt.IsZero() {
			r.RevokedAt = secs[i].Created.UTC()
		}
		r.Mesh, r.Cluster = mesh, cluster
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return identityLess(out[i].Mesh, out[i].Cluster, out[j].Mesh, out[j].Cluster) })
	return out, nil
}

// cutIdentity parses prefix + "<mesh>.<cluster>".
func cutIdentity(name, prefix string) (mesh, cluster string, ok bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return "", "", false
	}
	return splitIdentity(rest)
}

// errExists is matched by create's error when the Secret exists.
var errExists = errors.New("secret exists")

// secret makes the Secret name holding v as JSON under key (no data if key
// is "").
func (s *SecretStore) secret(name string, l map[string]string, key string, v any) (*ca.Secret, error) {
	sec := &ca.Secret{Name: name, Namespace: s.namespace, Labels: l}
	if key != "" {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return nil, err
		}
		sec.Data = map[string][]byte{key: append(b, '\n')}
	}
	return sec, nil
}

// create creates an immutable Secret; if one of that name exists, its
// error matches errExists.
func (s *SecretStore) create(ctx context.Context, name string, l map[string]string, key string, v any) error {
	sec, err := s.secret(name, l, key, v)
	if err != nil {
		return err
	}
	sec.Immutable = true
	err = s.client.Create(ctx, sec)
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("enrollment store: secret %s/%s: %w", s.namespace, name, errExists)
	}
	if err != nil {
		return s.apiError("create", name, err)
	}
	return nil
}

func (s *SecretStore) list(ctx context.Context, selector string) ([]ca.Secret, error) {
	secs, err := s.client.List(ctx, s.namespace, selector)
	if err != nil {
		return nil, s.apiError("list", "", fmt.Errorf("%s: %w", selector, err))
	}
	return secs, nil
}

// decode reads key of sec's data as JSON into v.
func (s *SecretStore) decode(sec *ca.Secret, key string, v any) error {
	b, ok := sec.Data[key]
	if !ok {
		keys := make([]string, 0, len(sec.Data))
		for k := range sec.Data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return fmt.Errorf("enrollment store: secret %s/%s: no key %s (it holds %s): not a record nave wrote",
			s.namespace, sec.Name, key, describeKeys(keys))
	}
	if err := json.Unmarshal(b, v); err != nil {
		return s.dataError(sec, key, "not JSON nave wrote: %v", err)
	}
	return nil
}

func describeKeys(keys []string) string {
	if len(keys) == 0 {
		return "no data"
	}
	return strings.Join(keys, ", ")
}

// dataError says what is wrong with key of sec's data.
func (s *SecretStore) dataError(sec *ca.Secret, key, format string, args ...any) error {
	return fmt.Errorf("enrollment store: secret %s/%s: key %s: %s", s.namespace, sec.Name, key, fmt.Sprintf(format, args...))
}

// apiError names the Secret (or, for a list, the namespace) and the verb
// of a failed request, and for a refusal says what the hub's identity
// lacks.
func (s *SecretStore) apiError(verb, name string, err error) error {
	what := "secret " + s.namespace + "/" + name
	if name == "" {
		what = "secrets of namespace " + s.namespace
	}
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("enrollment store: %s: %s: %w (the hub's identity needs get, create, update, list and delete on secrets in namespace %s: deploy/hub/rbac.yaml)",
			what, verb, err, s.namespace)
	}
	return fmt.Errorf("enrollment store: %s: %s: %w", what, verb, err)
}
