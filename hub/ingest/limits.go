package ingest

import (
	"fmt"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/meshlimits"
)

// limitError is a stream refused by one of its mesh's limits
// (ServerOptions.Limits): the spoke gets RESOURCE_EXHAUSTED with reason.
type limitError struct{ reason string }

func (e *limitError) Error() string { return e.reason }

// checkSpokes refuses a new cluster of id's mesh when the mesh already
// holds limit clusters (s.mu held). A cluster the Store holds (connected,
// or stale within its grace period) always comes back.
func (s *Store) checkSpokes(id ClusterIdentity, limit int) error {
	if limit <= 0 {
		return nil
	}
	if n := s.clusterCount(id.Mesh); n >= limit {
		return &limitError{reason: meshlimits.Exceeded(id.Mesh, "clusters", n, meshlimits.Spokes, limit) +
			fmt.Sprintf("; cluster %s is refused", id.Cluster)}
	}
	return nil
}

// clusterCount counts the clusters of mesh the Store holds (s.mu held).
func (s *Store) clusterCount(mesh string) int {
	n := 0
	for id := range s.records {
		if id.Mesh == mesh {
			n++
		}
	}
	return n
}

// objectRoom decides, for a message of kind from r's session, which new
// objects the mesh's limit leaves room for (s.mu held): it returns a
// function that reports, for each update in order, the reason it is
// refused, or "". An object the cluster already holds (or its stream sent
// before) is never refused: an update replaces it. Removals in the same
// message make room first.
func (s *Store) objectRoom(r *record, kind *meshconfig.Kind, removed []string, limit int) func(name string) string {
	if limit <= 0 {
		return func(string) string { return "" }
	}
	// The mesh's count is taken at the first new object: an update of
	// held objects (the common message, an endpoint moving) costs nothing.
	n := -1
	count := func() {
		n = 0
		for id, o := range s.records {
			if id.Mesh == r.Mesh {
				n += o.kindCount(kind.TypeURL)
			}
		}
		for _, name := range removed {
			if r.holds(kind.TypeURL, name) {
				n--
			}
		}
	}
	return func(name string) string {
		if r.holds(kind.TypeURL, name) {
			return ""
		}
		if n < 0 {
			count()
		}
		if n >= limit {
			s.limits.Refused(r.Mesh, meshlimits.ObjectsPerKind)
			return meshlimits.Exceeded(r.Mesh, kind.Kind+" objects", n, meshlimits.ObjectsPerKind, limit)
		}
		n++
		return ""
	}
}

// holds reports whether the cluster has name of typeURL as its stream
// stands: what it serves once synced; while its stream has not synced,
// what that stream has sent (staged, or confirmed unchanged) — what it
// will serve at the synced marker.
func (r *record) holds(typeURL, name string) bool {
	if r.Synced {
		_, ok := r.resources[typeURL][name]
		return ok
	}
	if e, staged := r.staged[typeURL][name]; staged {
		return e != nil
	}
	e, ok := r.resources[typeURL][name]
	return ok && e.session == r.session
}

// kindCount counts what the cluster holds of typeURL, as holds decides.
func (r *record) kindCount(typeURL string) int {
	if r.Synced {
		return len(r.resources[typeURL])
	}
	n := 0
	for name, e := range r.resources[typeURL] {
		if _, staged := r.staged[typeURL][name]; !staged && e.session == r.session {
			n++
		}
	}
	for _, e := range r.staged[typeURL] {
		if e != nil {
			n++
		}
	}
	return n
}

// recordUsage sets the mesh's usage of its limits (s.mu held): its
// clusters, and its largest kind's objects as served.
func (s *Store) recordUsage(mesh string) {
	if s.limits == nil {
		return
	}
	clusters, perKind := 0, map[string]int{}
	for id, r := range s.records {
		if id.Mesh != mesh {
			continue
		}
		clusters++
		for typeURL, byName := range r.resources {
			perKind[typeURL] += len(byName)
		}
	}
	if clusters == 0 {
		s.limits.Forget(mesh, meshlimits.Spokes)
		s.limits.Forget(mesh, meshlimits.ObjectsPerKind)
		return
	}
	largest := 0
	for _, n := range perKind {
		largest = max(largest, n)
	}
	s.limits.Usage(mesh, meshlimits.Spokes, float64(clusters))
	s.limits.Usage(mesh, meshlimits.ObjectsPerKind, float64(largest))
}
