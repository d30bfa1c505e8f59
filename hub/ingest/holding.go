package ingest

import (
	"sort"

	"github.com/navemesh/nave/shared/meshconfig"
)

// Holding is one cluster as this hub holds it, for the replica relay and
// its readiness: its epoch and owner, its stream state and, from Holding,
// its applied resources. A plain value; Objects are immutable and shared.
type Holding struct {
	ID      ClusterIdentity
	Epoch   Epoch
	Owner   string
	Relayed bool
	// Polled is set when this hub dialled the spoke (polled mode): its
	// owner is decided by hub/poll, not by balancing.
	Polled       bool
	Connected    bool
	Synced       bool
	EverSynced   bool
	DomainSuffix string
	// Objects are the applied resources by type URL and name (what is
	// served; nothing staged): set by Holding, only once EverSynced.
	Objects map[string]map[string]*meshconfig.Object
}

// Holding returns id as held now, with its resources.
func (s *Server) Holding(id ClusterIdentity) (Holding, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stores[id]
	if st == nil {
		return Holding{}, false
	}
	h := st.holding()
	if st.everSynced {
		h.Objects = make(map[string]map[string]*meshconfig.Object, len(st.resources))
		for typeURL, byName := range st.resources {
			m := make(map[string]*meshconfig.Object, len(byName))
			for name, e := range byName {
				m[name] = e.obj
			}
			h.Objects[typeURL] = m
		}
	}
	return h, true
}

// Held returns id as held now, without its resources.
func (s *Server) Held(id ClusterIdentity) (Holding, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stores[id]
	if st == nil {
		return Holding{}, false
	}
	return st.holding(), true
}

// Holdings lists every cluster held, without resources, by identity.
func (s *Server) Holdings() []Holding {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Holding, 0, len(s.stores))
	for _, st := range s.stores {
		out = append(out, st.holding())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID.String() < out[j].ID.String() })
	return out
}

func (st *store) holding() Holding {
	return Holding{ID: st.id, Epoch: st.epoch, Owner: st.owner, Relayed: st.relayed, Polled: st.polled, Connected: st.connected,
		Synced: st.synced, EverSynced: st.everSynced, DomainSuffix: st.domainSuffix}
}
