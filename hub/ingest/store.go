package ingest

import (
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/meshlimits"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/pushctx"
)

// StoreOptions configure a Store. A plain value; its funcs must be safe
// for concurrent use.
type StoreOptions struct {
	// StaleGracePeriod is how long a disconnected cluster's resources are
	// kept (marked stale) before they are withdrawn.
	StaleGracePeriod time.Duration
	// OnChange is called, without locks held, after a mesh's resources or
	// cluster states changed; endpointsOnly is set when a message changed
	// only endpoint kinds (WorkloadEntry, Workload), so that endpoint
	// updates can skip the config debounce. It must not block (ingest
	// never waits on pushes: docs/design.md invariant 7). nil: nobody.
	OnChange func(mesh string, endpointsOnly bool)
	// Expected lists the clusters the hub expects to come back after it
	// starts (those that synced before — Synced — and the enrolled ones,
	// not revoked); nil expects none. Until
	// StartupGrace has passed since NewStore, Ready publishes a mesh only
	// once every expected cluster of it has synced.
	Expected     func() []ClusterIdentity
	StartupGrace time.Duration
	// Synced is called, without locks held, when a cluster first syncs
	// after the Store made its record, so that the hub remembers it
	// (enroll.Known) and Expected lists it after a restart, in plaintext
	// mode too. It must not block. nil: nobody.
	Synced func(ClusterIdentity)
	// Replicas is the hub replica set this Store is part of; nil for a
	// single hub. When a disconnected cluster's grace period is over and
	// Replicas.MayWithdraw says not now, it is asked again every
	// RecheckWithdrawal (0: 5s).
	Replicas          ReplicaSet
	RecheckWithdrawal time.Duration
	Logger            *slog.Logger
	// Registerer receives the store's metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// LimitMetrics receives each mesh's usage of its limits and their
	// refusals (ServerOptions.Limits); nil records nowhere.
	LimitMetrics *meshlimits.Metrics
}

// Store keeps one record per (mesh, cluster): the cluster's state
// (State), its resources with what its current stream has staged until
// its synced marker, its ownership epoch, and its withdrawal after the
// grace period. It decides when a mesh may first be published (Ready) and
// reports every change through StoreOptions.OnChange and the ReplicaSet.
// Streams write to it through the Server (and Ownership.Relay), each only
// its own cluster.
//
// A Store is safe for concurrent use. One mutex guards every record;
// OnChange, ReplicaSet.Withdrawn and ReplicaSet.Changed are called without
// it held, ReplicaSet.MayWithdraw with it held.
type Store struct {
	opts    StoreOptions
	self    string // this replica's id; "" for a single hub
	log     *slog.Logger
	metrics *storeMetrics
	limits  *meshlimits.Metrics

	mu      sync.Mutex
	records map[ClusterIdentity]*record
	session uint64
	// withdrawn lists the clusters withdrawn after their grace period,
	// until they reconnect or are revoked (Withdraw).
	withdrawn map[ClusterIdentity]Withdrawal
	// started is when the Store was made; the startup grace runs from it.
	started time.Time
}

// origin says whose stream writes a cluster: a spoke's own (relayed
// false) or a peer replica's relay of its spoke's stream.
type origin struct {
	polled  bool // the hub dialled the spoke (Server.Poll)
	relayed bool
	owner   string
	epoch   Epoch
}

var errSuperseded = errors.New("superseded by a newer stream of the same cluster")

// cutOff is the cause of a stream the hub ended: a revocation
// (Store.Withdraw), or a move to another replica (Ownership.Move) when
// moved is set, with the replica to try first in redirect.
type cutOff struct {
	reason, redirect string
	moved            bool
}

func (c *cutOff) Error() string {
	if !c.moved {
		return "the hub closed this cluster's stream: " + c.reason
	}
	msg := "reconnect now: " + c.reason
	if c.redirect != "" {
		msg += "; try " + c.redirect + " first"
	}
	return msg
}

// NewStore returns an empty Store.
func NewStore(opts StoreOptions) *Store {
	if opts.OnChange == nil {
		opts.OnChange = func(string, bool) {}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Replicas == nil {
		opts.Replicas = ReplicaFuncs{}
	}
	if opts.RecheckWithdrawal <= 0 {
		opts.RecheckWithdrawal = 5 * time.Second
	}
	s := &Store{
		opts:      opts,
		self:      opts.Replicas.Self(),
		log:       opts.Logger,
		limits:    opts.LimitMetrics,
		records:   map[ClusterIdentity]*record{},
		withdrawn: map[ClusterIdentity]Withdrawal{},
		started:   time.Now(),
	}
	s.metrics = newStoreMetrics(opts.Registerer, func() float64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		return float64(len(s.withdrawn))
	}, func() float64 { return float64(len(s.missing())) })
	if opts.Expected != nil && opts.StartupGrace > 0 {
		// When the grace ends, meshes still waiting for a cluster are
		// built with what came back.
		time.AfterFunc(opts.StartupGrace, func() {
			meshes := map[string]bool{}
			for _, id := range s.missing() {
				meshes[id.Mesh] = true
			}
			for m := range meshes {
				s.log.Warn("startup grace over; serving the mesh without clusters that did not come back", "mesh", m, "grace", opts.StartupGrace)
				opts.OnChange(m, false)
			}
		})
	}
	return s
}

// session is one stream's write access to its cluster's record (open):
// what it sends changes the record only while it is the cluster's current
// stream. Its methods report false once a newer stream superseded it.
type session struct {
	s  *Store
	id ClusterIdentity
	n  uint64
}

// open registers a new stream for id, superseding any older one; it
// refuses a relayed stream whose epoch is older than id's current one,
// and a spoke's own stream of a cluster the Store does not hold when its
// mesh holds spokes clusters already (*limitError; 0: no limit). A relay
// is never refused for the limit: its owner replica admitted it. cancel
// ends the stream with a cause (errSuperseded, *cutOff).
func (s *Store) open(id ClusterIdentity, o origin, peer, suffix string, spokes int, cancel func(error)) (*session, error) {
	s.mu.Lock()
	defer s.opts.Replicas.Changed(id)
	defer s.mu.Unlock()
	r := s.records[id]
	if o.relayed && r != nil && o.epoch.Before(r.Epoch) {
		return nil, fmt.Errorf("epoch %s of replica %s is older than the cluster's current epoch %s: a late relay from an earlier owner is ignored", o.epoch, o.owner, r.Epoch)
	}
	if r == nil {
		if !o.relayed {
			if err := s.checkSpokes(id, spokes); err != nil {
				s.limits.Refused(id.Mesh, meshlimits.Spokes)
				return nil, err
			}
		}
		r = newRecord(id)
		s.records[id] = r
		s.recordUsage(id.Mesh)
	}
	if !o.relayed {
		// A spoke's own stream starts a new epoch, after any the cluster
		// had here, even with a clock that stepped back.
		o.owner = s.self
		o.epoch = Epoch{At: max(time.Now().UnixNano(), r.Epoch.At+1), Replica: s.self}
	}
	r.Epoch, r.Owner, r.Relayed, r.Polled = o.epoch, o.owner, o.relayed, o.polled
	delete(s.withdrawn, id)
	if r.cancel != nil {
		r.cancel(errSuperseded)
	}
	if r.withdraw != nil {
		r.withdraw.Stop()
		r.withdraw = nil
	}
	s.session++
	r.session = s.session
	r.cancel = cancel
	r.Peer = peer
	if r.DomainSuffix != suffix && r.EverSynced {
		s.log.Warn("cluster changed its domain suffix", "mesh", id.Mesh, "cluster", id.Cluster, "was", r.DomainSuffix, "now", suffix)
	}
	r.DomainSuffix = suffix
	r.Connected = true
	r.Synced = false
	r.staged = nil // a new stream sends its full state anew
	r.hinted, r.Resumed = nil, false
	r.ConnectedAt = time.Now()
	if o.relayed {
		s.log.Info("relayed cluster stream opened", "mesh", id.Mesh, "cluster", id.Cluster, "owner", o.owner, "epoch", o.epoch, "session", r.session)
	} else {
		s.log.Info("spoke connected", "mesh", id.Mesh, "cluster", id.Cluster, "peer", peer, "session", r.session, "epoch", o.epoch)
	}
	return &session{s: s, id: id, n: r.session}, nil
}

// current returns the session's record, s.mu held; nil once superseded.
func (ss *session) current() *record {
	r := ss.s.records[ss.id]
	if r == nil || r.session != ss.n {
		return nil
	}
	return r
}

// message locks the Store for a message of the session and returns its
// record, the message's time noted; once superseded, nil with the Store
// unlocked.
func (ss *session) message() *record {
	ss.s.mu.Lock()
	r := ss.current()
	if r == nil {
		ss.s.mu.Unlock()
		return nil
	}
	r.LastMessageAt = time.Now()
	return r
}

// update is one resource of a pushed message: its wire name, and the
// object decoded from it or the reason it was refused.
type update struct {
	name   string
	obj    *meshconfig.Object
	reason string
}

// apply stores one message of kind: updates, then removals by name. A
// refused update leaves the last good version in place. A new object
// beyond the mesh's objectsPerKind (0: no limit) is refused too, with the
// limit named; apply returns those refusals, and reports whether the
// session is still current.
func (ss *session) apply(kind *meshconfig.Kind, updates []update, removed []string, objectsPerKind int) (refused []update, current bool) {
	s := ss.s
	r := ss.message()
	if r == nil {
		return nil, false
	}
	room := s.objectRoom(r, kind, removed, objectsPerKind)
	changed, nacked := false, false
	for _, u := range updates {
		key := resourceKey{kind.TypeURL, u.name}
		delete(r.hinted, key)
		if u.obj != nil {
			if reason := room(u.name); reason != "" {
				u = update{name: u.name, reason: reason}
				refused = append(refused, u)
			}
		}
		if u.obj == nil {
			nacked = true
			rj := meshconfig.Rejection{Kind: kind.Kind, Name: u.name, Reason: u.reason, At: time.Now()}
			if ns, name, ok := meshconfig.SplitKey(u.name); ok {
				rj.Namespace, rj.Name = ns, name
			}
			r.rejected[key] = rj
			r.keep(kind.TypeURL, u.name, ss.n)
			continue
		}
		delete(r.rejected, key)
		if r.put(kind.TypeURL, u.obj, ss.n) {
			changed = true
		}
	}
	for _, name := range removed {
		delete(r.hinted, resourceKey{kind.TypeURL, name})
		delete(r.rejected, resourceKey{kind.TypeURL, name})
		if r.remove(kind.TypeURL, name) {
			changed = true
		}
	}
	if nacked {
		r.Nacks++
	} else {
		r.Acks++
	}
	s.metrics.resources.WithLabelValues(ss.id.Mesh, ss.id.Cluster).Set(float64(r.count()))
	if changed {
		s.recordUsage(ss.id.Mesh)
	}
	s.mu.Unlock()
	if changed {
		s.opts.Replicas.Changed(ss.id)
		s.opts.OnChange(ss.id.Mesh, kind.EndpointsOnly())
	}
	return refused, true
}

// refuse counts a message refused as a whole (an unknown type). It
// reports whether the session is still current.
func (ss *session) refuse() bool {
	r := ss.message()
	if r == nil {
		return false
	}
	r.Nacks++
	ss.s.mu.Unlock()
	return true
}

// synced applies the synced marker: what the session staged is applied,
// and what it did not send pruned. It reports whether the session is
// still current.
func (ss *session) synced() bool {
	s := ss.s
	r := ss.message()
	if r == nil {
		return false
	}
	changed, first := false, !r.EverSynced
	if !r.Synced {
		staged := r.stagedCount()
		skipped := len(r.hinted)
		var removed int
		changed, removed = r.sync()
		if r.Resumed {
			s.metrics.skipped.Add(float64(skipped))
		}
		s.log.Info("spoke synced", "mesh", ss.id.Mesh, "cluster", ss.id.Cluster, "resources", r.count(), "applied", staged, "removed", removed, "resumed", r.Resumed, "unchanged", skipped)
	}
	r.Acks++
	s.metrics.resources.WithLabelValues(ss.id.Mesh, ss.id.Cluster).Set(float64(r.count()))
	if changed {
		s.recordUsage(ss.id.Mesh)
	}
	s.mu.Unlock()
	if first && s.opts.Synced != nil {
		s.opts.Synced(ss.id)
	}
	if changed {
		s.opts.Replicas.Changed(ss.id)
		s.opts.OnChange(ss.id.Mesh, false)
	}
	return true
}

// close marks the cluster disconnected if the session is still its current
// stream, and schedules the withdrawal of its resources after the grace
// period.
func (ss *session) close() {
	s, id := ss.s, ss.id
	s.mu.Lock()
	r := ss.current()
	if r == nil {
		s.mu.Unlock()
		return
	}
	r.Connected = false
	r.cancel = nil
	r.disconnectedAt = time.Now()
	r.withdraw = time.AfterFunc(s.opts.StaleGracePeriod, func() { s.withdrawAfterGrace(id, ss.n) })
	relayed, owner := r.Relayed, r.Owner
	s.mu.Unlock()
	if relayed {
		s.log.Warn("relayed cluster stream ended; resources kept as stale", "mesh", id.Mesh, "cluster", id.Cluster, "owner", owner, "grace", s.opts.StaleGracePeriod)
	} else {
		s.log.Warn("spoke disconnected; resources kept as stale", "mesh", id.Mesh, "cluster", id.Cluster, "grace", s.opts.StaleGracePeriod)
	}
	s.opts.Replicas.Changed(id)
	s.opts.OnChange(id.Mesh, false)
}

// withdrawAfterGrace withdraws id at the end of its grace period, if
// session's stream was its last and the replica set agrees.
func (s *Store) withdrawAfterGrace(id ClusterIdentity, session uint64) {
	s.mu.Lock()
	r := s.records[id]
	if r == nil || r.session != session || r.Connected {
		s.mu.Unlock()
		return
	}
	if !s.opts.Replicas.MayWithdraw(id, r.Owner) {
		// Not this replica's decision now (its owner is alive elsewhere,
		// or this replica is cut off from most of its peers): ask again.
		r.withdraw = time.AfterFunc(s.opts.RecheckWithdrawal, func() { s.withdrawAfterGrace(id, session) })
		s.mu.Unlock()
		return
	}
	epoch := r.Epoch
	s.withdrawn[id] = Withdrawal{At: time.Now(), Resources: r.count(),
		Reason: fmt.Sprintf("disconnected at %s and not back within the grace period (%s)", r.disconnectedAt.UTC().Format(time.RFC3339), s.opts.StaleGracePeriod)}
	s.drop(id, r, "stale cluster withdrawn after grace period")
	s.opts.Replicas.Withdrawn(id, epoch)
}

// Withdraw cuts id off at once: it closes id's open stream, if any (the
// spoke gets PermissionDenied with reason), and drops its resources
// without waiting for the grace period — for a revoked cluster, whose
// endpoints must not attract traffic any longer. It reports whether there
// was anything to withdraw; keeping the spoke from reconnecting is the
// Authenticator's part.
func (s *Store) Withdraw(id ClusterIdentity, reason string) bool {
	s.mu.Lock()
	delete(s.withdrawn, id) // revoked: listed by enrollment, not here
	r := s.records[id]
	if r == nil {
		s.mu.Unlock()
		return false
	}
	if r.cancel != nil {
		r.cancel(&cutOff{reason: reason})
	}
	if r.withdraw != nil {
		r.withdraw.Stop()
	}
	s.drop(id, r, "cluster withdrawn at once", "reason", reason)
	return true
}

// WithdrawMesh withdraws every cluster of mesh at once (Withdraw: open
// streams closed with reason, resources dropped) and forgets those
// withdrawn after their grace period — for a mesh the hub stops serving
// (deleted). It returns the clusters it withdrew.
func (s *Store) WithdrawMesh(mesh, reason string) []ClusterIdentity {
	s.mu.Lock()
	var ids []ClusterIdentity
	for id := range s.records {
		if id.Mesh == mesh {
			ids = append(ids, id)
		}
	}
	for id := range s.withdrawn {
		if id.Mesh == mesh {
			delete(s.withdrawn, id)
		}
	}
	s.mu.Unlock()
	sort.Slice(ids, func(i, j int) bool { return ids[i].String() < ids[j].String() })
	var out []ClusterIdentity
	for _, id := range ids {
		if s.Withdraw(id, reason) {
			out = append(out, id)
		}
	}
	return out
}

// move closes id's open stream if it is a spoke's own (not a relay, not
// polled) and still the stream of epoch (Ownership.Move).
func (s *Store) move(id ClusterIdentity, epoch Epoch, reason, redirect string) bool {
	s.mu.Lock()
	r := s.records[id]
	if r == nil || r.cancel == nil || r.Relayed || r.Polled || r.Epoch != epoch {
		// A polled spoke is not moved: the hub dials it, and which
		// replica does is hub/poll's decision.
		s.mu.Unlock()
		return false
	}
	r.cancel(&cutOff{reason: reason, redirect: redirect, moved: true})
	r.cancel = nil
	session := r.session
	s.mu.Unlock()
	s.log.Info("spoke asked to reconnect elsewhere", "mesh", id.Mesh, "cluster", id.Cluster, "session", session, "reason", reason, "redirect", redirect)
	return true
}

// withdrawRelayed withdraws id as a peer replica did after its grace
// period, unless it came back since (Ownership.WithdrawRelayed).
func (s *Store) withdrawRelayed(id ClusterIdentity, epoch Epoch, reason string) bool {
	s.mu.Lock()
	r := s.records[id]
	if r == nil || r.Connected || epoch.Before(r.Epoch) {
		s.mu.Unlock()
		return false
	}
	if r.withdraw != nil {
		r.withdraw.Stop()
	}
	s.withdrawn[id] = Withdrawal{At: time.Now(), Resources: r.count(), Reason: reason}
	s.drop(id, r, "stale cluster withdrawn by a peer replica", "epoch", epoch, "reason", reason)
	return true
}

// drop removes id's record r (s.mu held; drop releases it), its metrics,
// logs msg with attrs, and reports the change.
func (s *Store) drop(id ClusterIdentity, r *record, msg string, attrs ...any) {
	n := r.count()
	delete(s.records, id)
	s.recordUsage(id.Mesh)
	s.mu.Unlock()
	s.metrics.resources.DeleteLabelValues(id.Mesh, id.Cluster)
	s.metrics.withdrawals.Inc()
	s.log.Warn(msg, append([]any{"mesh", id.Mesh, "cluster", id.Cluster, "resources", n}, attrs...)...)
	s.opts.Replicas.Changed(id)
	s.opts.OnChange(id.Mesh, false)
}

// holdings lists what f selects, by identity (Ownership.Holdings).
func (s *Store) holdings(f HoldingFilter) []Holding {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.Only != (ClusterIdentity{}) {
		if r := s.records[f.Only]; r != nil {
			return []Holding{r.holding(f)}
		}
		return nil
	}
	out := make([]Holding, 0, len(s.records))
	for _, r := range s.records {
		out = append(out, r.holding(f))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ClusterIdentity.String() < out[j].ClusterIdentity.String() })
	return out
}

// Ready reports whether mesh may be published for the first time
// (pushctx.Options.Ready): during the startup grace, once every expected
// cluster of it has synced; after, once any cluster has. A hub that
// restarts thus never shows proxies a mesh missing a cluster that is
// merely slower to reconnect (docs/design.md invariant 8).
func (s *Store) Ready(mesh string, clusters []mesh.ClusterInput) bool {
	if !pushctx.AnySynced(mesh, clusters) {
		return false
	}
	if s.opts.Expected == nil || time.Since(s.started) >= s.opts.StartupGrace {
		return true
	}
	synced := map[string]bool{}
	for _, c := range clusters {
		synced[c.Name] = synced[c.Name] || c.Synced
	}
	for _, id := range s.opts.Expected() {
		if id.Mesh == mesh && !synced[id.Cluster] {
			return false
		}
	}
	return true
}

// missing lists the expected clusters that have not connected since the
// Store was made.
func (s *Store) missing() []ClusterIdentity {
	if s.opts.Expected == nil {
		return nil
	}
	expected := s.opts.Expected()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ClusterIdentity
	for _, id := range expected {
		if s.isMissing(id) {
			out = append(out, id)
		}
	}
	return out
}

// isMissing reports whether the Store has heard nothing of id since it
// was made (s.mu held).
func (s *Store) isMissing(id ClusterIdentity) bool {
	_, withdrawn := s.withdrawn[id]
	return s.records[id] == nil && !withdrawn
}

// Meshes lists the meshes that have at least one cluster.
func (s *Store) Meshes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	for id := range s.records {
		if !seen[id.Mesh] {
			seen[id.Mesh] = true
			out = append(out, id.Mesh)
		}
	}
	sort.Strings(out)
	return out
}

// Clusters returns every cluster of mesh with its objects, for a snapshot
// build (pushctx.Source). Objects are immutable and shared.
func (s *Store) Clusters(meshName string) []mesh.ClusterInput {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []mesh.ClusterInput
	for id, r := range s.records {
		if id.Mesh == meshName {
			out = append(out, r.input(r.objects()))
		}
	}
	return out
}

// Status reports every cluster's stream and sync state, and the clusters
// withdrawn after their grace period that have not come back, and those
// expected that have not connected since the hub started.
func (s *Store) Status() []ClusterStatus {
	var expected []ClusterIdentity
	if s.opts.Expected != nil {
		expected = s.opts.Expected() // may read a store: not under s.mu
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ClusterStatus, 0, len(s.records))
	for _, r := range s.records {
		out = append(out, r.status(s.opts.StaleGracePeriod))
	}
	empty := func(id ClusterIdentity) ClusterStatus {
		return ClusterStatus{State: State{ClusterIdentity: id}, Resources: map[string]int{}, Rejected: []meshconfig.Rejection{}}
	}
	for id, w := range s.withdrawn {
		if s.records[id] == nil {
			cs := empty(id)
			cs.Withdrawn = &w
			out = append(out, cs)
		}
	}
	for _, id := range expected {
		if s.isMissing(id) {
			at := s.started
			cs := empty(id)
			cs.Missing = &at
			out = append(out, cs)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ClusterIdentity.String() < out[j].ClusterIdentity.String() })
	return out
}
