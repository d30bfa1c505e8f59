package xdsbootstrap

import (
	"fmt"
	"hash/fnv"
	"net"
	"slices"
	"strings"
)

// Replica is one hub replica as a bootstrap lists it: the name its home
// order is worked out from (stable across restarts, such as a
// StatefulSet pod's) and the host:port that reaches that replica alone.
// A plain value.
type Replica struct {
	Name, Address string
}

// ParseReplica parses NAME=HOST:PORT.
func ParseReplica(s string) (Replica, error) {
	name, addr, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return Replica{}, fmt.Errorf("%q: want NAME=HOST:PORT", s)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return Replica{}, fmt.Errorf("%q: address: %w", s, err)
	}
	return Replica{Name: name, Address: addr}, nil
}

// HomeOrder orders the replicas for the proxies of one namespace of a
// mesh, their home first, the others as the order to fail over in
// (docs/decisions/051-replicas-and-generation.md): rendezvous hashing of
// the mesh and namespace with each replica's name. Every proxy of a
// namespace thus has the same home, so the namespace's proxy keys are
// generated on one replica; namespaces spread over the replicas; and a
// replica added or removed changes only the namespaces it gains or held.
// The result is a new slice; replicas is not changed.
func HomeOrder(mesh, namespace string, replicas []Replica) []Replica {
	type ranked struct {
		r     Replica
		score uint64
	}
	rs := make([]ranked, len(replicas))
	for i, r := range replicas {
		h := fnv.New64a()
		h.Write([]byte(mesh))
		h.Write([]byte{0})
		h.Write([]byte(namespace))
		h.Write([]byte{0})
		h.Write([]byte(r.Name))
		rs[i] = ranked{r, mix(h.Sum64())}
	}
	slices.SortStableFunc(rs, func(a, b ranked) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		}
		return strings.Compare(a.r.Name, b.r.Name)
	})
	out := make([]Replica, len(rs))
	for i, r := range rs {
		out[i] = r.r
	}
	return out
}

// mix is a 64-bit finalizer (splitmix64's): FNV alone leaves inputs that
// differ in their last bytes close together.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
