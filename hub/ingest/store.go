package ingest

import (
	"cmp"
	"slices"
	"time"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/mesh"
)

// entry is one accepted resource and the stream session that last sent
// (or, for a rejected update, re-confirmed) it.
type entry struct {
	obj     *meshconfig.Object
	session uint64
}

// store is one cluster's resources. It is guarded by Server.mu.
//
// resources is the cluster's last synced state and the changes its spoke
// made since: what the hub serves. While a stream has not sent its synced
// marker, what it sends that changes content is staged instead (a nil
// entry stages a removal) and applied, with the pruning of what the stream
// did not send, only when the marker arrives (DESIGN.md invariant 8): a
// spoke that dies in the middle of its full state changes nothing, and a
// cluster that never synced contributes nothing.
type store struct {
	id        ClusterIdentity
	resources map[string]map[string]*entry // type URL -> name -> entry
	staged    map[string]map[string]*entry // type URL -> name -> entry (nil: removal)
	// everSynced is set at the first synced marker: resources is then a
	// complete state of the cluster.
	everSynced bool
	// sorted caches input's object list, kept up to date by small changes
	// (a copy is made before the first change after input handed it out:
	// readers hold it); nil when it must be sorted again. edits counts the
	// changes applied to it since input last handed it out.
	sorted       []*meshconfig.Object
	sortedShared bool
	edits        int
	// resumed is set when the current stream resumed (Server.resume): the
	// hub told it what it held, and it sends only what differs. hinted
	// lists what was held then and the stream has not sent since, until
	// its synced marker.
	resumed bool
	hinted  map[resourceKey]struct{}
	// rejected holds the current rejection of each resource refused.
	rejected map[resourceKey]meshconfig.Rejection

	// domainSuffix is the cluster's DNS suffix, from its stream.
	domainSuffix string

	// epoch orders the streams that owned the cluster (across replicas);
	// owner is the replica of the current or last one, relayed set when
	// that is a peer's relay.
	epoch   Epoch
	owner   string
	relayed bool
	// polled is set when the current or last stream was dialled by this
	// hub (polled mode, Server.Poll).
	polled bool

	session        uint64
	cancel         func(error)
	peer           string
	connected      bool
	synced         bool
	connectedAt    time.Time
	disconnectedAt time.Time
	lastMessageAt  time.Time
	withdraw       *time.Timer
	acks, nacks    uint64
}

// resourceKey names a pushed resource: its type URL and wire name.
type resourceKey struct{ typeURL, name string }

func newStore(id ClusterIdentity) *store {
	return &store{id: id, resources: map[string]map[string]*entry{}, rejected: map[resourceKey]meshconfig.Rejection{}}
}

// put accepts o from session. Until the session has synced, a change of
// content is staged (see store) and put reports no change.
func (s *store) put(typeURL string, o *meshconfig.Object, session uint64) (changed bool) {
	if !s.synced {
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
func (s *store) apply(typeURL string, o *meshconfig.Object, session uint64) (changed bool) {
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
	return true
}

// edit applies one put (or removal) of o to the sorted list, or drops the
// list when a batch of changes makes sorting afresh cheaper.
func (s *store) edit(o *meshconfig.Object, removed bool) {
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
func (s *store) keep(typeURL, name string, session uint64) {
	if e, ok := s.resources[typeURL][name]; ok {
		e.session = session
	}
}

// remove drops a resource; until the session has synced the removal is
// staged and remove reports no change.
func (s *store) remove(typeURL, name string) (changed bool) {
	if !s.synced {
		s.stage(typeURL, name, nil)
		return false
	}
	return s.drop(typeURL, name)
}

func (s *store) stage(typeURL, name string, e *entry) {
	if s.staged == nil {
		s.staged = map[string]map[string]*entry{}
	}
	if s.staged[typeURL] == nil {
		s.staged[typeURL] = map[string]*entry{}
	}
	s.staged[typeURL][name] = e
}

func (s *store) unstage(typeURL, name string) {
	delete(s.staged[typeURL], name)
}

// stagedCount is how many changes wait for the synced marker.
func (s *store) stagedCount() int {
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
func (s *store) sync() (changed bool, removed int) {
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
	s.synced, s.everSynced = true, true
	return true, removed + s.prune()
}

func (s *store) drop(typeURL, name string) (changed bool) {
	if e, ok := s.resources[typeURL][name]; ok {
		delete(s.resources[typeURL], name)
		s.edit(e.obj, true)
		return true
	}
	return false
}

// prune drops what the current session did not send: the spoke's full
// state is complete (it sent the synced marker), so anything older is gone
// at the source.
func (s *store) prune() (removed int) {
	for _, byName := range s.resources {
		for name, e := range byName {
			if e.session != s.session {
				delete(byName, name)
				s.sorted = nil
				removed++
			}
		}
	}
	for k, r := range s.rejected {
		if _, ok := s.resources[k.typeURL][k.name]; !ok && r.At.Before(s.connectedAt) {
			delete(s.rejected, k)
		}
	}
	return removed
}

func (s *store) count() int {
	n := 0
	for _, byName := range s.resources {
		n += len(byName)
	}
	return n
}

func (s *store) input() mesh.ClusterInput {
	in := mesh.ClusterInput{
		Name:         s.id.Cluster,
		Connected:    s.connected,
		Synced:       s.synced,
		Stale:        !s.connected,
		DomainSuffix: s.domainSuffix,
	}
	if !s.everSynced {
		return in // nothing the cluster said is complete yet
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
	// Readers get the shared list (never modified: a change makes a new one).
	in.Objects = s.sorted
	return in
}
