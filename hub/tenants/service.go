package tenants

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Purger removes what the hub keeps of a mesh being deleted, once: its
// enrollment state (join tokens, enrolled clusters, revocations) and its
// CA unless keepCA. It is called on one replica at a time (the one that
// claimed the purge) and again after a failure or a crash, so it must be
// idempotent. hub/server implements it.
type Purger interface {
	Purge(ctx context.Context, mesh string, keepCA bool) error
}

// PurgerFunc adapts a func to Purger; it is as safe for concurrent use as
// the func.
type PurgerFunc func(ctx context.Context, mesh string, keepCA bool) error

// Purge implements Purger.
func (f PurgerFunc) Purge(ctx context.Context, mesh string, keepCA bool) error {
	return f(ctx, mesh, keepCA)
}

// DefaultRefreshInterval is how often a replica reads the meshes from the
// store when Options.RefreshInterval is zero.
const DefaultRefreshInterval = 2 * time.Second

// purgeClaimTTL is how long a replica's claim on a purge holds off the
// others: after it, another replica takes the purge over (the claimer
// crashed). purgeTimeout bounds one Purge call, shorter, so that two
// replicas never purge one mesh at once.
const (
	purgeClaimTTL = time.Minute
	purgeTimeout  = 45 * time.Second
)

// DefaultLimits are the limits of a mesh whose spec sets none (or zero):
// generous, so that only a tenant far beyond a usual mesh meets them;
// the same as the hub's limits.* defaults (hub/hubconfig).
var DefaultLimits = Limits{ObjectsPerKind: 20000, Proxies: 10000, Spokes: 500, PushesPerSecond: 50}

// Options configure a Service: plain values, read once by New. The zero
// value is usable.
type Options struct {
	// Seeds are ca.meshes: created in the store once (Store.Seed).
	Seeds []Seed
	// RefreshInterval is how often Run reads the store; zero:
	// DefaultRefreshInterval.
	RefreshInterval time.Duration
	// Defaults fill the zero fields of every mesh's Limits as the
	// Registry publishes them; zero fields here: DefaultLimits'.
	Defaults Limits
	// Replica names this replica in purge claims; empty: a random name.
	Replica string
	Logger  *slog.Logger
}

// Service is one replica's view of the meshes: the Store, the Registry
// it feeds (Refresh, Run) and the operator API on it (RegisterAPI). It is
// safe for concurrent use. The Registry's subscribers are called during
// a refresh: they must not call the Service's Refresh, Create, Update or
// Delete on their own goroutine (that waits for the refresh).
type Service struct {
	store    *Store
	registry *Registry
	opts     Options
	log      *slog.Logger

	refreshMu sync.Mutex // one refresh at a time
	// specErrs are the spec errors last logged, by mesh, so that a bad
	// spec is logged once, not at every refresh.
	specErrs map[string]string
	// seen is the version of each spec the last refresh read: a spec
	// changed outside the hub is taken up once two reads agree.
	seen map[string]string
	kick chan struct{}
}

// Open opens the meshes of the hub's state store of kind (state.store:
// dir under stateDir, kubernetes in namespace through kubeconfigPath),
// seeds it from opts.Seeds and reads it once, so that the Registry holds
// every mesh when Open returns. Run keeps it current.
func Open(ctx context.Context, kind, stateDir, namespace, kubeconfigPath string, opts Options) (*Service, error) {
	store, err := OpenStore(kind, stateDir, namespace, kubeconfigPath)
	if err != nil {
		return nil, err
	}
	return New(ctx, store, opts)
}

// New is Open on an open Store.
func New(ctx context.Context, store *Store, opts Options) (*Service, error) {
	if opts.RefreshInterval <= 0 {
		opts.RefreshInterval = DefaultRefreshInterval
	}
	opts.Defaults = opts.Defaults.or(DefaultLimits)
	if opts.Replica == "" {
		opts.Replica = newUID()[:12]
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Service{store: store, registry: NewRegistry(), opts: opts, log: opts.Logger, specErrs: map[string]string{}, seen: map[string]string{},
		kick: make(chan struct{}, 1)}
	created, err := store.Seed(ctx, opts.Seeds)
	if err != nil {
		return nil, err
	}
	if len(created) > 0 {
		s.log.Info("meshes seeded from ca.meshes", "meshes", created)
	}
	switch recs, err := s.Refresh(ctx); {
	case recs == nil:
		return nil, err
	case err != nil:
		// The meshes read are served; Run retries the rest.
		s.log.Error("meshes: taking up a change failed; retrying", "err", err.Error())
	}
	return s, nil
}

// Registry is the meshes this replica knows, as last read.
func (s *Service) Registry() *Registry { return s.registry }

// Store is the store the meshes are kept in.
func (s *Service) Store() *Store { return s.store }

// or fills l's zero fields from def.
func (l Limits) or(def Limits) Limits {
	l.ObjectsPerKind = cmp.Or(l.ObjectsPerKind, def.ObjectsPerKind)
	l.Proxies = cmp.Or(l.Proxies, def.Proxies)
	l.Spokes = cmp.Or(l.Spokes, def.Spokes)
	l.PushesPerSecond = cmp.Or(l.PushesPerSecond, def.PushesPerSecond)
	return l
}

// Refresh reads the store, takes up what changed (records a spec written
// by hand, counts a changed spec's generation, starts deleting a mesh
// whose spec was removed) and makes the Registry hold what it read. It
// returns the records read, for Run's purges, and what failed of taking
// changes up (the rest is taken up all the same). A spec that does not
// decode, changes the trust domain or names one an older mesh has, is
// logged once and the mesh's last good version kept.
func (s *Service) Refresh(ctx context.Context) ([]*Record, error) {
	s.refreshMu.Lock()
	defer s.refreshMu.Unlock()
	recs, err := s.store.Load(ctx)
	if err != nil {
		return nil, err
	}
	var errs []error
	seenErr := map[string]bool{}
	prevSeen := s.seen
	s.seen = map[string]string{}
	for _, r := range recs {
		if r.spec != nil {
			s.seen[r.Name] = contentVersion(r.spec.data)
		}
		if r.SpecErr != nil {
			s.specError(r.Name, r.SpecErr)
			seenErr[r.Name] = true
		}
		switch {
		case r.Spec != nil && (r.status == nil || r.status.Phase == Active):
			if r.status != nil && r.status.TrustDomain != r.Spec.TrustDomain {
				s.specError(r.Name, fmt.Errorf("%s: %w", s.store.b.where(kindSpec, r.Name), fieldErr("spec.trustDomain",
					"%q: a mesh's trust domain cannot change (it is %q; its certificates name it)", r.Spec.TrustDomain, r.status.TrustDomain)))
				seenErr[r.Name] = true
				continue
			}
			if err := checkTrustDomains(r.Spec, olderThan(r, recs)); err != nil {
				// Refused: a hand-written spec is not recorded, a recorded
				// mesh keeps its last good spec.
				s.specError(r.Name, fmt.Errorf("%s: %w", s.store.b.where(kindSpec, r.Name), err))
				seenErr[r.Name] = true
				continue
			}
			// A spec written outside the hub (a file edited in place) may
			// be read half-written, and a cut at a line boundary is valid
			// YAML with less in it: take it up once the next read finds it
			// unchanged (decision 036).
			if v := contentVersion(r.spec.data); (r.status == nil || r.status.SpecVersion != v) && prevSeen[r.Name] != v {
				continue
			}
			if err := s.store.takeUp(ctx, r); err != nil {
				errs = append(errs, fmt.Errorf("mesh %s: %w", r.Name, err))
			}
		case r.spec == nil && r.status != nil && r.status.Phase == Active:
			// The operator removed the spec (from git): delete the mesh,
			// keeping its CA, which only an explicit delete destroys —
			// once the next read finds it still gone.
			if _, was := prevSeen[r.Name]; was {
				continue
			}
			s.log.Info("mesh spec removed: deleting the mesh, keeping its CA", "mesh", r.Name, "spec", s.store.b.where(kindSpec, r.Name))
			if _, err := s.store.MarkDeleting(ctx, r.Name, true); err != nil && !errors.Is(err, ErrConflict) {
				errs = append(errs, fmt.Errorf("mesh %s: %w", r.Name, err))
			}
			if err := s.store.reload(ctx, r); err != nil && !errors.Is(err, errNotFound) {
				errs = append(errs, fmt.Errorf("mesh %s: %w", r.Name, err))
			}
		}
	}
	for name := range s.specErrs {
		if !seenErr[name] {
			delete(s.specErrs, name)
		}
	}
	s.registry.Replace(s.publish(recs))
	return recs, errors.Join(errs...)
}

// olderThan is the records whose trust domains r's spec must not take: of
// a mesh the hub recorded, those recorded before it; of one it has not
// recorded yet, every recorded one.
func olderThan(r *Record, recs []*Record) []*Record {
	var out []*Record
	for _, o := range recs {
		if o.status == nil || o == r {
			continue
		}
		if r.status == nil || o.status.Created.Before(r.status.Created) ||
			(o.status.Created.Equal(r.status.Created) && o.Name < r.Name) {
			out = append(out, o)
		}
	}
	return out
}

// specError logs a mesh's spec error once.
func (s *Service) specError(name string, err error) {
	if s.specErrs[name] == err.Error() {
		return
	}
	s.specErrs[name] = err.Error()
	s.log.Error("mesh spec refused: its last good version is kept", "mesh", name, "err", err.Error())
}

// publish turns records into the meshes the Registry holds: a mesh the
// hub recorded, at the spec its generation counts, with the default
// limits filled in; a mesh whose spec is bad keeps the version already
// published. Two meshes never share a trust domain: of two that would,
// the older keeps it.
func (s *Service) publish(recs []*Record) []*Mesh {
	var out []*Mesh
	for _, r := range recs {
		if r.status == nil {
			continue
		}
		prev, hadPrev := s.registry.Get(r.Name)
		if hadPrev && prev.UID != r.status.UID {
			hadPrev = false
		}
		m := r.Mesh()
		switch {
		case hadPrev && m.Generation == prev.Generation && m.Phase == prev.Phase && m.KeepCA == prev.KeepCA:
			m = prev // unchanged: keep the published value
		case hadPrev && m.Generation == prev.Generation:
			// Only the phase changed: the config stays the last published.
			cp := *prev
			cp.Phase, cp.KeepCA = m.Phase, m.KeepCA
			m = &cp
		default:
			m.Limits = m.Limits.or(s.opts.Defaults)
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b *Mesh) int {
		return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.Name, b.Name))
	})
	owner := map[string]string{}
	kept := out[:0]
	for _, m := range out {
		tds := trustDomains(m.TrustDomain, m.Config)
		clash := ""
		for _, td := range tds {
			if o, ok := owner[td]; ok {
				clash = o
			}
		}
		if clash != "" {
			s.specError(m.Name, fmt.Errorf("trust domain of mesh %s is mesh %s's: not served", m.Name, clash))
			continue
		}
		for _, td := range tds {
			owner[td] = m.Name
		}
		kept = append(kept, m)
	}
	return kept
}

// Run keeps the Registry current until ctx ends: it refreshes every
// RefreshInterval (and at once after a change made through this
// Service), and purges the meshes being deleted through purger, then
// removes their records. With a nil purger a Deleting mesh stays until a
// replica with one purges it. Errors are logged and retried at the next
// refresh; Run returns nil when ctx ends.
func (s *Service) Run(ctx context.Context, purger Purger) error {
	t := time.NewTicker(s.opts.RefreshInterval)
	defer t.Stop()
	failing := false
	for {
		recs, err := s.Refresh(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			s.log.Error("meshes: refresh failed; retrying", "err", err.Error())
			failing = true
		case err == nil && failing:
			s.log.Info("meshes: refresh works again")
			failing = false
		}
		if recs != nil && purger != nil && s.purge(ctx, recs, purger) {
			continue // refresh at once: records went
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-s.kick:
		}
	}
}

// kickRun makes Run refresh at once.
func (s *Service) kickRun() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// purge purges the Deleting meshes this replica can claim and removes
// their records; it reports whether it removed any.
func (s *Service) purge(ctx context.Context, recs []*Record, purger Purger) bool {
	removed := false
	for _, r := range recs {
		if r.status == nil || r.status.Phase != Deleting {
			continue
		}
		st := *r.status
		now := s.store.now().UTC()
		if st.PurgeBy != "" && st.PurgeBy != s.opts.Replica && now.Sub(st.PurgeAt) < purgeClaimTTL {
			continue // another replica purges it
		}
		st.PurgeBy, st.PurgeAt = s.opts.Replica, now
		if err := s.store.putStatus(ctx, r, st); err != nil {
			if !errors.Is(err, ErrConflict) {
				s.log.Error("meshes: claiming a purge failed", "mesh", r.Name, "err", err.Error())
			}
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, purgeTimeout)
		err := purger.Purge(pctx, r.Name, st.KeepCA)
		cancel()
		if err != nil {
			s.log.Error("mesh purge failed; retrying", "mesh", r.Name, "err", err.Error())
			continue
		}
		if err := s.store.remove(ctx, r); err != nil {
			s.log.Error("meshes: removing a purged mesh's record failed; retrying", "mesh", r.Name, "err", err.Error())
			continue
		}
		s.log.Info("mesh deleted", "mesh", r.Name, "uid", st.UID, "keepCA", st.KeepCA)
		removed = true
	}
	return removed
}

// Create creates a mesh from its spec document (Store.Create) and
// refreshes this replica at once.
func (s *Service) Create(ctx context.Context, doc []byte) (*Mesh, error) {
	m, err := s.store.Create(ctx, doc)
	if err != nil {
		return nil, err
	}
	s.refreshNow(ctx)
	return s.published(m), nil
}

// Update replaces a mesh's spec (Store.Update) and refreshes this replica
// at once.
func (s *Service) Update(ctx context.Context, name string, doc []byte) (*Mesh, error) {
	m, err := s.store.Update(ctx, name, doc)
	if err != nil {
		return nil, err
	}
	s.refreshNow(ctx)
	return s.published(m), nil
}

// Delete starts deleting a mesh (Store.MarkDeleting); this replica stops
// serving it at once and Run purges it.
func (s *Service) Delete(ctx context.Context, name string, keepCA bool) (*Mesh, error) {
	m, err := s.store.MarkDeleting(ctx, name, keepCA)
	if err != nil {
		return nil, err
	}
	s.refreshNow(ctx)
	s.kickRun()
	return s.published(m), nil
}

// refreshNow refreshes after a change; a failure is Run's to report.
func (s *Service) refreshNow(ctx context.Context) { _, _ = s.Refresh(ctx) }

// published is the Registry's version of m if it holds that incarnation
// and generation, else m with defaults.
func (s *Service) published(m *Mesh) *Mesh {
	if p, ok := s.registry.Get(m.Name); ok && p.UID == m.UID && p.Generation >= m.Generation {
		return p
	}
	cp := *m
	cp.Limits = cp.Limits.or(s.opts.Defaults)
	return &cp
}
