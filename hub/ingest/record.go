package ingest

import (
	"cmp"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/navemesh/nave/shared/meshconfig"
)

// entry is one accepted resource and the stream session that last sent
// (or, for a rejected update, re-confirmed) it.
type entry struct {
	obj     *meshconfig.Object
	session uint64
}

// record is one cluster as a Store keeps it: its state value, its
// resources and its current stream. It is guarded by Store.mu.
//
// resources is the cluster's last synced state and the changes its spoke
// made since: what the hub serves. While a stream has not sent its synced
// marker, what it sends that changes content is staged instead (a nil
// entry stages a removal) and applied, with the pruning of what the stream
// did not send, only when the marker arrives (docs/design.md invariant 8):
// a spoke that dies in the middle of its full state changes nothing, and a
// cluster that never synced contributes nothing.
type record struct {
	State
	resources map[string]map[string]*entry // type URL -> name -> entry
	staged    map[string]map[string]*entry // type URL -> name -> entry (nil: removal)
	// sorted caches objects' list, kept up to date by small changes (a
	// copy is made before the first change after objects handed it out:
	// readers hold it); nil when it must be sorted again. edits counts the
	// changes applied to it since objects last handed it out.
	sorted       []*meshconfig.Object
	sortedShared bool
	edits        int
	// hinted lists, while a resumed stream (State.Resumed) has not sent
	// its synced marker, what the hub held when it resumed and the stream
	// has not sent since.
	hinted map[resourceKey]struct{}
	// rejected holds the current rejection of each resource refused.
	rejected map[resourceKey]meshconfig.Rejection
	// rev numbers the last change applied to resources (revs: unique in
	// the process, growing; the record's creation when none); log lists the latest
	// of them (oldest first), every change after rev logBase, so that a
	// reader that saw rev r can ask for only what changed since (the
	// replica relay: Holding.Changes).
	rev, logBase uint64
	log          []logged

	// session numbers the current or last stream; cancel ends the current
	// one (nil once it ended) with a cause (errSuperseded, *cutOff).
	session        uint64
	cancel         func(error)
	disconnectedAt time.Time
	withdraw       *time.Timer
}

// resourceKey names a pushed resource: its type URL and wire name.
type resourceKey struct{ typeURL, name string }

// logged is one change of a record's resources: at which rev.
type logged struct {
	rev uint64
	key resourceKey
}

// changeLog bounds a record's log of changes: a reader further behind is
// given the whole state again.
const changeLog = 1024

// revs numbers every change of every record of the process: a record's
// revs never repeat another's, not even those of the record it replaced
// for the same cluster, so a reader's rev of a dropped record is older
// than a new record's logBase and gets the whole state (changedSince).
var revs atomic.Uint64

// logChange counts a change of the resource typeURL/name.
func (s *record) logChange(typeURL, name string) {
	s.rev = revs.Add(1)
	if len(s.log) >= changeLog {
		drop := len(s.log) / 2
		s.logBase = s.log[drop-1].rev
		s.log = append(s.log[:0], s.log[drop:]...)
	}
	s.log = append(s.log, logged{rev: s.rev, key: resourceKey{typeURL, name}})
}

// changedSince returns the applied resources changed after rev since, by
// type URL and name (nil: removed), or false when the log no longer
// reaches back that far (or since is not a rev of this record).
func (s *record) changedSince(since uint64) (map[string]map[string]*meshconfig.Object, bool) {
	if since < s.logBase || since > s.rev {
		return nil, false
	}
	out := map[string]map[string]*meshconfig.Object{}
	i, _ := slices.BinarySearchFunc(s.log, since+1, func(l logged, r uint64) int { return cmp.Compare(l.rev, r) })
	for _, l := range s.log[i:] {
		byName := out[l.key.typeURL]
		if byName == nil {
			byName = map[string]*meshconfig.Object{}
			out[l.key.typeURL] = byName
		}
		var o *meshconfig.Object
		if e, ok := s.resources[l.key.typeURL][l.key.name]; ok {
			o = e.obj
		}
		byName[l.key.name] = o
	}
	return out, true
}

func newRecord(id ClusterIdentity) *record {
	rev := revs.Add(1)
	return &record{State: State{ClusterIdentity: id}, resources: map[string]map[string]*entry{}, rejected: map[resourceKey]meshconfig.Rejection{},
		rev: rev, logBase: rev}
}

// put accepts o from session. Until the session has synced, a change of
// content is staged (see record) and put reports no change.
func (s *record) put(typeURL string, o *meshconfig.Object, session uint64) (changed bool) {
	if !s.Synced {
		name := o.Key()
		if e, ok := s.resources[typeURL][name]; ok && e.obj.Version == o.Version {
			e.session = session
			s.unstage(typeURL, name)
			return false
		}
		s.stage(typeURL, name, &entry{obj: o, session: session})
		return false
	}
	return s.apply(typeURL, o, session)
}

// apply puts o into resources.
func (s *record) apply(typeURL string, o *meshconfig.Object, session uint64) (changed bool) {
	byName := s.resources[typeURL]
	if byName == nil {
		byName = map[string]*entry{}
		s.resources[typeURL] = byName
	}
	name := o.Key()
	if e, ok := byName[name]; ok && e.obj.Version == o.Version {
		e.session = session
		return false
	}
	byName[name] = &entry{obj: o, session: session}
	s.edit(o, false)
	s.logChange(typeURL, name)
	return true
}

// edit applies one put (or removal) of o to the sorted list, or drops the
// list when a batch of changes makes sorting afresh cheaper.
func (s *record) edit(o *meshconfig.Object, removed bool) {
	if s.sorted == nil {
		return
	}
	if s.edits++; s.edits > 64 {
		s.sorted = nil
		return
	}
	if s.sortedShared {
		s.sorted, s.sortedShared = slices.Clone(s.sorted), false
	}
	i, found := slices.BinarySearchFunc(s.sorted, o, compareObjects)
	switch {
	case removed && found:
		s.sorted = slices.Delete(s.sorted, i, i+1)
	case removed:
	case found:
		s.sorted[i] = o
	default:
		s.sorted = slices.Insert(s.sorted, i, o)
	}
}

func compareObjects(a, b *meshconfig.Object) int {
	return cmp.Or(cmp.Compare(a.Kind.Kind, b.Kind.Kind), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

// keep marks a resource as confirmed by this session without changing it:
// a rejected update leaves the last good version in place.
func (s *record) keep(typeURL, name string, session uint64) {
	if e, ok := s.resources[typeURL][name]; ok {
		e.session = session
	}
}

// remove drops a resource; until the session has synced the removal is
// staged and remove reports no change.
func (s *record) remove(typeURL, name string) (changed bool) {
	if !s.Synced {
		s.stage(typeURL, name, nil)
		return false
	}
	return s.drop(typeURL, name)
}

func (s *record) stage(typeURL, name string, e *entry) {
	if s.staged == nil {
		s.staged = map[string]map[string]*entry{}
	}
	if s.staged[typeURL] == nil {
		s.staged[typeURL] = map[string]*entry{}
	}
	s.staged[typeURL][name] = e
}

func (s *record) unstage(typeURL, name string) {
	delete(s.staged[typeURL], name)
}

// stagedCount is how many changes wait for the synced marker.
func (s *record) stagedCount() int {
	n := 0
	for _, byName := range s.staged {
		n += len(byName)
	}
	return n
}

// sync applies what the session staged, then prunes what it did not send:
// the spoke's full state is complete. The cluster's state changes (it is
// synced again), so sync always reports a change; removed counts the
// resources it dropped.
func (s *record) sync() (changed bool, removed int) {
	for typeURL, byName := range s.staged {
		for name, e := range byName {
			if e == nil {
				if s.drop(typeURL, name) {
					removed++
				}
			} else {
				s.apply(typeURL, e.obj, e.session)
			}
		}
	}
	s.staged, s.hinted = nil, nil
	s.Synced, s.EverSynced = true, true
	return true, removed + s.prune()
}

func (s *record) drop(typeURL, name string) (changed bool) {
	if e, ok := s.resources[typeURL][name]; ok {
		delete(s.resources[typeURL], name)
		s.edit(e.obj, true)
		s.logChange(typeURL, name)
		return true
	}
	return false
}

// prune drops what the current session did not send: the spoke's full
// state is complete (it sent the synced marker), so anything older is gone
// at the source.
func (s *record) prune() (removed int) {
	for typeURL, byName := range s.resources {
		for name, e := range byName {
			if e.session != s.session {
				delete(byName, name)
				s.sorted = nil
				s.logChange(typeURL, name)
				removed++
			}
		}
	}
	for k, r := range s.rejected {
		if _, ok := s.resources[k.typeURL][k.name]; !ok && r.At.Before(s.ConnectedAt) {
			delete(s.rejected, k)
		}
	}
	return removed
}

func (s *record) count() int {
	n := 0
	for _, byName := range s.resources {
		n += len(byName)
	}
	return n
}

// objects is the sorted list of the applied resources, shared with the
// caller (never modified: a change makes a new one); nil until the
// cluster ever synced (nothing it said is complete yet).
func (s *record) objects() []*meshconfig.Object {
	if !s.EverSynced {
		return nil
	}
	if s.sorted == nil {
		objs := make([]*meshconfig.Object, 0, s.count())
		for _, byName := range s.resources {
			for _, e := range byName {
				objs = append(objs, e.obj)
			}
		}
		slices.SortFunc(objs, compareObjects)
		s.sorted = objs
	}
	s.sortedShared, s.edits = true, 0
	return s.sorted
}

// holding is s as Ownership.Holdings lists it.
func (s *record) holding(f HoldingFilter) Holding {
	h := Holding{State: s.State, Rev: s.rev}
	if !f.Objects || !s.EverSynced {
		return h
	}
	if f.ChangedSince > 0 {
		if changes, ok := s.changedSince(f.ChangedSince); ok {
			h.Changes = changes
			return h
		}
	}
	h.Objects = make(map[string]map[string]*meshconfig.Object, len(s.resources))
	for typeURL, byName := range s.resources {
		m := make(map[string]*meshconfig.Object, len(byName))
		for name, e := range byName {
			m[name] = e.obj
		}
		h.Objects[typeURL] = m
	}
	return h
}

// status is s as /debug/spokes shows it; grace is the stale grace period.
func (s *record) status(grace time.Duration) ClusterStatus {
	cs := ClusterStatus{State: s.State, Stale: !s.Connected, Resources: map[string]int{}, Rejected: []meshconfig.Rejection{},
		Pending: s.stagedCount()}
	if !s.Connected {
		d := s.disconnectedAt
		w := d.Add(grace)
		cs.DisconnectedAt, cs.WithdrawAt = &d, &w
	}
	for typeURL, byName := range s.resources {
		if k, ok := meshconfig.KindByTypeURL(typeURL); ok && len(byName) > 0 {
			cs.Resources[k.Kind] = len(byName)
		}
	}
	for _, r := range s.rejected {
		cs.Rejected = append(cs.Rejected, r)
	}
	sort.Slice(cs.Rejected, func(i, j int) bool {
		a, b := cs.Rejected[i], cs.Rejected[j]
		return meshconfig.Key(a.Namespace, a.Name) < meshconfig.Key(b.Namespace, b.Name)
	})
	return cs
}
