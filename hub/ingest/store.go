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
type store struct {
	id        Identity
	resources map[string]map[string]*entry // type URL -> name -> entry
	// sorted caches input's object list, kept up to date by small changes
	// (a copy is made before the first change after input handed it out:
	// readers hold it); nil when it must be sorted again. edits counts the
	// changes applied to it since input last handed it out.
	sorted       []*meshconfig.Object
	sortedShared bool
	edits        int
	// rejected holds the current rejection reason by type URL + " " + name.
	rejected map[string]Rejection

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

// Rejection is a resource the hub refused, and why.
type Rejection struct {
	TypeURL string    `json:"typeUrl"`
	Name    string    `json:"name"`
	Reason  string    `json:"reason"`
	At      time.Time `json:"at"`
}

func newStore(id Identity) *store {
	return &store{id: id, resources: map[string]map[string]*entry{}, rejected: map[string]Rejection{}}
}

func (s *store) put(typeURL string, o *meshconfig.Object, session uint64) (changed bool) {
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

func (s *store) remove(typeURL, name string) (changed bool) {
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
		if _, ok := s.resources[r.TypeURL][r.Name]; !ok && r.At.Before(s.connectedAt) {
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
		Name:      s.id.Cluster,
		Connected: s.connected,
		Synced:    s.synced,
		Stale:     !s.connected,
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
