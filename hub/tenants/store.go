package tenants

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/navemesh/nave/hub/ca"
)

// Errors of a Store's mutations, matched with errors.Is.
var (
	// ErrExists refuses a create of a name that has a mesh (another
	// replica may have created it first).
	ErrExists = errors.New("mesh exists")
	// ErrNotFound is a mesh the store does not hold.
	ErrNotFound = errors.New("no such mesh")
	// ErrDeleting refuses a change of a mesh being deleted, and a create
	// of its name until its record is gone.
	ErrDeleting = errors.New("mesh is being deleted")
	// ErrConflict is an update that raced another: read and try again.
	ErrConflict = errors.New("mesh changed meanwhile")
)

// status is the hub's record of a mesh's incarnation, kept beside its
// spec so that the spec stays the operator's (a file or Secret a vendor
// keeps in git and the hub never writes to once created).
type status struct {
	UID         string    `json:"uid"`
	Generation  int64     `json:"generation"`
	Created     time.Time `json:"created"`
	TrustDomain string    `json:"trustDomain"`
	Phase       Phase     `json:"phase"`
	KeepCA      bool      `json:"keepCA,omitempty"`
	// SpecVersion is the content version of the spec Generation counts,
	// and Spec that spec: the last good one, served while the spec in the
	// store is one the hub refused, also by a replica started since.
	SpecVersion string `json:"specVersion"`
	Spec        string `json:"spec"`
	// PurgeBy and PurgeAt claim a Deleting mesh's purge for one replica.
	PurgeBy string    `json:"purgeBy,omitempty"`
	PurgeAt time.Time `json:"purgeAt,omitzero"`
}

// Record is what the store holds of one mesh name: its spec (nil if none
// or invalid, then SpecErr says why) and its status (nil if the hub has
// not recorded the mesh yet: a spec written by hand, adopted at the next
// refresh). A Record is read by one goroutine: Load returns new ones.
type Record struct {
	Name    string
	Spec    *Spec
	SpecErr error
	spec    *blob
	status  *status
	statusV string
	// good is the status's spec, decoded.
	good *Spec
}

// Store keeps the meshes in the hub's state store (state.store): a
// directory (state.dir/meshes) or Secrets of state.namespace. Each mesh
// is a spec, the declarative document an operator writes, and a status,
// the hub's. Create is arbitrated by the store: of concurrent creates of
// one name, across replicas, exactly one succeeds. Store is safe for
// concurrent use, also by several processes sharing the store.
type Store struct {
	b   backend
	now func() time.Time

	mu sync.Mutex
	// decoded caches the specs decoded by Load, by name and content
	// version, so that a refresh decodes only what changed.
	decoded map[string]decodedSpec
}

type decodedSpec struct {
	spec *Spec
	err  error
}

// OpenStore opens the meshes of the hub's state store of kind (its
// state.store): ca.StoreDir under stateDir, or ca.StoreKubernetes in
// namespace through the kubeconfig at kubeconfigPath (empty: in-cluster,
// else $KUBECONFIG).
func OpenStore(kind, stateDir, namespace, kubeconfigPath string) (*Store, error) {
	switch kind {
	case ca.StoreDir:
		b, err := openDirBackend(stateDir)
		if err != nil {
			return nil, err
		}
		return &Store{b: b, now: time.Now, decoded: map[string]decodedSpec{}}, nil
	case ca.StoreKubernetes:
		client, err := ca.OpenSecretClient(kubeconfigPath)
		if err != nil {
			return nil, err
		}
		return NewSecretStore(client, namespace), nil
	}
	return nil, fmt.Errorf("meshes store %q: want %s or %s", kind, ca.StoreDir, ca.StoreKubernetes)
}

// NewSecretStore returns a Store in the Secrets of namespace, through
// client.
func NewSecretStore(client ca.SecretClient, namespace string) *Store {
	return &Store{b: &secretBackend{client: client, namespace: namespace}, now: time.Now, decoded: map[string]decodedSpec{}}
}

// Load reads every mesh record, by name.
func (s *Store) Load(ctx context.Context) ([]*Record, error) {
	specs, err := s.b.list(ctx, kindSpec)
	if err != nil {
		return nil, err
	}
	stats, err := s.b.list(ctx, kindStatus)
	if err != nil {
		return nil, err
	}
	recs := map[string]*Record{}
	rec := func(name string) *Record {
		r := recs[name]
		if r == nil {
			r = &Record{Name: name}
			recs[name] = r
		}
		return r
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	used := map[string]decodedSpec{}
	for i := range specs {
		r := rec(specs[i].name)
		r.spec = &specs[i]
		r.Spec, r.SpecErr = s.cachedDecode(used, specs[i])
	}
	for _, st := range stats {
		if ValidateName(st.name) != nil {
			continue
		}
		var x status
		if err := json.Unmarshal(st.data, &x); err != nil || x.UID == "" {
			return nil, fmt.Errorf("meshes: %s: not a status nave wrote", s.b.where(kindStatus, st.name))
		}
		r := rec(st.name)
		r.status, r.statusV = &x, st.version
		if x.Spec != "" {
			r.good, _ = s.cachedDecode(used, blob{name: st.name, data: []byte(x.Spec)})
		}
	}
	s.decoded = used
	out := make([]*Record, 0, len(recs))
	for _, r := range recs {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *Record) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// cachedDecode is decode, of the cache if it holds b; what it decodes
// goes into used, the cache of the next Load. Called with s.mu held.
func (s *Store) cachedDecode(used map[string]decodedSpec, b blob) (*Spec, error) {
	key := b.name + "/" + contentVersion(b.data)
	d, ok := s.decoded[key]
	if !ok {
		d.spec, d.err = s.decode(b)
	}
	used[key] = d
	return d.spec, d.err
}

// decode decodes a stored spec and checks that it is the one its place
// names.
func (s *Store) decode(b blob) (*Spec, error) {
	spec, err := DecodeSpec(b.data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.b.where(kindSpec, b.name), err)
	}
	if spec.Name != b.name {
		return nil, fmt.Errorf("%s: %w", s.b.where(kindSpec, b.name),
			fieldErr("metadata.name", "%q, but it is stored as mesh %q", spec.Name, b.name))
	}
	return spec, nil
}

// Mesh is the record as the Registry publishes it (without defaults
// applied): its status, with the spec its generation counts. Nil if the
// hub has not recorded it yet.
func (r *Record) Mesh() *Mesh {
	st := r.status
	if st == nil {
		return nil
	}
	m := &Mesh{Name: r.Name, UID: st.UID, Generation: st.Generation, Created: st.Created, TrustDomain: st.TrustDomain,
		Phase: st.Phase, KeepCA: st.KeepCA, Config: &meshv1alpha1.MeshConfig{TrustDomain: st.TrustDomain}}
	if r.good != nil {
		m.Config, m.Networks, m.Limits = r.good.Config, r.good.Networks, r.good.Limits
	}
	return m
}

// Create stores a new mesh from its spec document, after checking it
// (DecodeSpec) and that no other mesh has its trust domain or one of its
// aliases. Of concurrent creates of one name exactly one succeeds; the
// others get ErrExists.
func (s *Store) Create(ctx context.Context, doc []byte) (*Mesh, error) {
	spec, err := DecodeSpec(doc)
	if err != nil {
		return nil, err
	}
	recs, err := s.Load(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkTrustDomains(spec, recs); err != nil {
		return nil, err
	}
	old := &Record{Name: spec.Name}
	switch err := s.reload(ctx, old); {
	case err == nil && old.status.Phase == Deleting:
		return nil, fmt.Errorf("mesh %s: %w (create it again once it is gone)", spec.Name, ErrDeleting)
	case err == nil:
		return nil, fmt.Errorf("mesh %s: %w", spec.Name, ErrExists)
	case !errors.Is(err, errNotFound):
		return nil, err
	}
	if err := s.b.create(ctx, kindSpec, spec.Name, spec.Raw); err != nil {
		if errors.Is(err, errExists) {
			return nil, fmt.Errorf("mesh %s: %w", spec.Name, ErrExists)
		}
		return nil, err
	}
	r := &Record{Name: spec.Name, Spec: spec, spec: &blob{name: spec.Name, data: spec.Raw}}
	if err := s.adopt(ctx, r); err != nil {
		return nil, err
	}
	return r.Mesh(), nil
}

// adopt records a mesh whose spec has no status yet: a new incarnation.
// If another replica recorded it first, r takes that status.
func (s *Store) adopt(ctx context.Context, r *Record) error {
	st := status{UID: newUID(), Generation: 1, Created: s.now().UTC().Truncate(time.Second), TrustDomain: r.Spec.TrustDomain,
		Phase: Active, SpecVersion: contentVersion(r.spec.data), Spec: string(r.spec.data)}
	data, _ := json.Marshal(st)
	err := s.b.create(ctx, kindStatus, r.Name, data)
	if errors.Is(err, errExists) {
		return s.reload(ctx, r)
	}
	if err != nil {
		return err
	}
	return s.reload(ctx, r)
}

// reload reads r's status again.
func (s *Store) reload(ctx context.Context, r *Record) error {
	b, err := s.b.get(ctx, kindStatus, r.Name)
	if err != nil {
		return err
	}
	var st status
	if err := json.Unmarshal(b.data, &st); err != nil {
		return fmt.Errorf("meshes: %s: %w", s.b.where(kindStatus, r.Name), err)
	}
	r.status, r.statusV = &st, b.version
	r.good = nil
	if st.Spec != "" {
		r.good, _ = s.decode(blob{name: r.Name, data: []byte(st.Spec)})
	}
	return nil
}

// Update replaces the spec of mesh name with doc (whose metadata.name
// must be name), checked as Create checks it; its trust domain cannot
// change. The mesh's generation counts the change.
func (s *Store) Update(ctx context.Context, name string, doc []byte) (*Mesh, error) {
	spec, err := DecodeSpec(doc)
	if err != nil {
		return nil, err
	}
	if spec.Name != name {
		return nil, fieldErr("metadata.name", "%q, but the mesh updated is %q", spec.Name, name)
	}
	recs, err := s.Load(ctx)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(recs, func(r *Record) bool { return r.Name == name })
	if i < 0 || recs[i].spec == nil {
		return nil, fmt.Errorf("mesh %s: %w", name, ErrNotFound)
	}
	r := recs[i]
	if r.status != nil && r.status.Phase == Deleting {
		return nil, fmt.Errorf("mesh %s: %w", name, ErrDeleting)
	}
	if r.status != nil && r.status.TrustDomain != spec.TrustDomain {
		return nil, fieldErr("spec.trustDomain", "%q: a mesh's trust domain cannot change (it is %q; its certificates name it)",
			spec.TrustDomain, r.status.TrustDomain)
	}
	if err := checkTrustDomains(spec, recs); err != nil {
		return nil, err
	}
	if err := s.b.update(ctx, kindSpec, name, spec.Raw, r.spec.version); err != nil {
		return nil, s.mutationErr(name, err)
	}
	r.Spec, r.SpecErr = spec, nil
	r.spec = &blob{name: name, data: spec.Raw}
	if err := s.takeUp(ctx, r); err != nil {
		return nil, err
	}
	return r.Mesh(), nil
}

// takeUp makes r's status count its spec: a new record for a new spec, a
// new generation for a changed one. Replicas taking up the same change
// write the same status.
func (s *Store) takeUp(ctx context.Context, r *Record) error {
	if r.Spec == nil {
		return nil
	}
	if r.status == nil {
		return s.adopt(ctx, r)
	}
	v := contentVersion(r.spec.data)
	if r.status.Phase != Active || r.status.SpecVersion == v || r.status.TrustDomain != r.Spec.TrustDomain {
		return nil
	}
	st := *r.status
	st.Generation++
	st.SpecVersion, st.Spec = v, string(r.spec.data)
	if err := s.putStatus(ctx, r, st); err != nil && !errors.Is(err, ErrConflict) {
		return err
	}
	return s.reload(ctx, r)
}

// MarkDeleting starts deleting mesh name: every replica stops serving it
// at its next refresh; the purge, then the removal of its record,
// follow (Service.Run). keepCA keeps its CA. A mesh already Deleting
// keeps its first keepCA unless this one keeps the CA.
func (s *Store) MarkDeleting(ctx context.Context, name string, keepCA bool) (*Mesh, error) {
	if err := ValidateName(name); err != nil {
		return nil, fieldErr("metadata.name", "%v", err)
	}
	r := &Record{Name: name}
	switch err := s.reload(ctx, r); {
	case errors.Is(err, errNotFound):
		// A spec no replica has recorded yet: record it, then delete.
		b, gerr := s.b.get(ctx, kindSpec, name)
		if errors.Is(gerr, errNotFound) {
			return nil, fmt.Errorf("mesh %s: %w", name, ErrNotFound)
		}
		if gerr != nil {
			return nil, gerr
		}
		r.spec = &b
		if r.Spec, r.SpecErr = s.decode(b); r.SpecErr != nil {
			return nil, r.SpecErr
		}
		if err := s.adopt(ctx, r); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, err
	}
	st := *r.status
	if st.Phase == Deleting && (st.KeepCA || !keepCA) {
		return r.Mesh(), nil
	}
	st.Phase, st.KeepCA = Deleting, st.KeepCA || keepCA
	if err := s.putStatus(ctx, r, st); err != nil {
		return nil, err
	}
	return r.Mesh(), nil
}

// putStatus writes st over r's status at the version read.
func (s *Store) putStatus(ctx context.Context, r *Record, st status) error {
	data, _ := json.Marshal(st)
	if err := s.b.update(ctx, kindStatus, r.Name, data, r.statusV); err != nil {
		return s.mutationErr(r.Name, err)
	}
	return s.reload(ctx, r)
}

func (s *Store) mutationErr(name string, err error) error {
	switch {
	case errors.Is(err, errConflict):
		return fmt.Errorf("mesh %s: %w", name, ErrConflict)
	case errors.Is(err, errNotFound):
		return fmt.Errorf("mesh %s: %w", name, ErrNotFound)
	}
	return err
}

// remove removes a purged mesh's record: its spec, then its status (so
// that no spec is left without a status, which would be a new mesh).
func (s *Store) remove(ctx context.Context, r *Record) error {
	if r.spec != nil {
		if err := s.b.remove(ctx, kindSpec, r.Name, r.spec.version); err != nil {
			return s.mutationErr(r.Name, err)
		}
	}
	if err := s.b.remove(ctx, kindStatus, r.Name, r.statusV); err != nil {
		return s.mutationErr(r.Name, err)
	}
	return nil
}

// Seed is a mesh of ca.meshes, created in the store on the hub's first
// start with it. A plain value.
type Seed struct{ Name, TrustDomain string }

// Seed creates each seed's mesh once: a seed already created (even if
// deleted since) or a mesh already in the store is left as is. It returns
// the names it created.
func (s *Store) Seed(ctx context.Context, seeds []Seed) ([]string, error) {
	var created []string
	for _, sd := range seeds {
		switch _, err := s.b.get(ctx, kindSeeded, sd.Name); {
		case err == nil:
			continue
		case !errors.Is(err, errNotFound):
			return created, err
		}
		doc, err := EncodeSpec(sd.Name, sd.TrustDomain, Limits{}, nil)
		if err != nil {
			return created, err
		}
		switch _, err := s.Create(ctx, doc); {
		case err == nil:
			created = append(created, sd.Name)
		case errors.Is(err, ErrExists), errors.Is(err, ErrDeleting):
		default:
			return created, fmt.Errorf("seeding mesh %s from ca.meshes: %w", sd.Name, err)
		}
		if err := s.b.create(ctx, kindSeeded, sd.Name, nil); err != nil && !errors.Is(err, errExists) {
			return created, err
		}
	}
	return created, nil
}

// checkTrustDomains refuses spec if its trust domain or one of its
// aliases is another mesh's trust domain or alias.
func checkTrustDomains(spec *Spec, recs []*Record) error {
	mine := trustDomains(spec.TrustDomain, spec.Config)
	for _, r := range recs {
		if r.Name == spec.Name {
			continue
		}
		var theirs []string
		switch {
		case r.Spec != nil:
			theirs = trustDomains(r.Spec.TrustDomain, r.Spec.Config)
		case r.status != nil:
			theirs = []string{r.status.TrustDomain}
		}
		for i, td := range mine {
			if slices.Contains(theirs, td) {
				field := "spec.trustDomain"
				if i > 0 {
					field = fmt.Sprintf("spec.meshConfig.trustDomainAliases[%d]", i-1)
				}
				return fieldErr(field, "%q is mesh %s's (two meshes never share a trust domain)", td, r.Name)
			}
		}
	}
	return nil
}

func trustDomains(td string, cfg *meshv1alpha1.MeshConfig) []string {
	return append([]string{td}, cfg.GetTrustDomainAliases()...)
}

func newUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
