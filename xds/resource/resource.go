// Package resource holds what the xDS engine sends: resources marshalled
// once (Prepared) and shared by every stream, the set of them one proxy
// receives (ProxyResources) with its change history, per-type sets and
// their versions (Set, SetVersion), and the interfaces through which an
// ADS server reads them (Source, State).
//
// Every value here is immutable once published, or guards its own memos:
// safe for concurrent use.
package resource

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/types/known/anypb"

	"github.com/navemesh/nave/xds/mesh"
)

// Prepared is a resource marshalled once, shared by every stream.
// Immutable.
type Prepared struct {
	Name string
	Any  *anypb.Any
	// Hash identifies the content (hex SHA-256 prefix of the bytes).
	Hash string
	// wire is the resource encoded as one entry of a
	// DeltaDiscoveryResponse's resources (a Resource of Name, Hash and
	// Any), whose tail from sotwAt is its entry in a DiscoveryResponse's
	// resources (the Any), whose tail is Any.Value: one allocation. nil
	// for a Prepared not made by Prepare.
	wire   []byte
	sotwAt int
}

// Wire returns the resource encoded as one entry of a DiscoveryResponse's
// resources (field 2, the Any), or nil if it was not made by Prepare:
// what an ADS server writes without encoding it again. Read-only.
func (p *Prepared) Wire() []byte {
	if p.wire == nil {
		return nil
	}
	return p.wire[p.sotwAt:]
}

// DeltaWire returns the resource encoded as one entry of a
// DeltaDiscoveryResponse's resources (field 2: a Resource with Name,
// Version Hash and the Any), or nil if it was not made by Prepare.
// Read-only.
func (p *Prepared) DeltaWire() []byte { return p.wire }

// ProxyResources is what one proxy key receives from a published state:
// resources by type URL and name, and the config problems met generating
// them. Immutable once returned; its memos (Set, ChangesFrom) are guarded.
type ProxyResources struct {
	Resources map[string]map[string]*Prepared // type URL -> name -> resource
	Problems  []mesh.Problem

	// id identifies the result (0 for one made by Combine). A
	// result derived from an earlier one (only endpoints changed) keeps
	// how it differs from its base and from up to historyDepth results
	// before it: steps, newest first (never the results themselves).
	id    uint64
	steps []step

	// from memoizes ChangesFrom by (since, type).
	fromMu sync.Mutex
	from   map[fromKey]*Changes

	setMu sync.Mutex
	sets  map[string]*Set
}

// Changes is how one type of a result differs from the result it was
// derived from: resources added or changed (sorted by name), and names
// removed (sorted). Read-only.
type Changes struct {
	Updated []*Prepared
	Removed []string
}

// Empty reports whether nothing changed.
func (c *Changes) Empty() bool { return len(c.Updated) == 0 && len(c.Removed) == 0 }

var (
	resultIDs atomic.Uint64
	noChanges = &Changes{}
)

func newResults() uint64 { return resultIDs.Add(1) }

// ID identifies the result among every result of this process (0: none).
func (r *ProxyResources) ID() uint64 { return r.id }

// historyDepth bounds how many derivations back ChangesSince can answer.
const historyDepth = 8

// step is how a result differs from the result with id base, by type.
type step struct {
	base    uint64
	changes map[string]*Changes
}

// ChangesSince reports how typeURL's resources differ from those of the
// result with id since, when that is known: since is this result, or one
// of the (up to historyDepth) results it was derived from, step by step.
// A stream holding exactly since's resources can then send just the
// changes instead of comparing every resource.
func (r *ProxyResources) ChangesSince(since uint64, typeURL string) (*Changes, bool) {
	if since == 0 {
		return nil, false
	}
	if since == r.id {
		return noChanges, true
	}
	n := slices.IndexFunc(r.steps, func(st step) bool { return st.base == since })
	switch {
	case n < 0:
		return nil, false
	case n == 0:
		if c := r.steps[0].changes[typeURL]; c != nil {
			return c, true
		}
		return noChanges, true
	}
	// Several steps: every name any of them touched is updated to what this
	// result holds, or removed if it holds none.
	all := r.Resources[typeURL]
	touched := map[string]bool{}
	for _, st := range r.steps[:n+1] {
		if c := st.changes[typeURL]; c != nil {
			for _, p := range c.Updated {
				touched[p.Name] = true
			}
			for _, name := range c.Removed {
				touched[name] = true
			}
		}
	}
	if len(touched) == 0 {
		return noChanges, true
	}
	out := &Changes{}
	for name := range touched {
		if p := all[name]; p != nil {
			out.Updated = append(out.Updated, p)
		} else {
			out.Removed = append(out.Removed, name)
		}
	}
	slices.SortFunc(out.Updated, compareNames)
	slices.Sort(out.Removed)
	return out, true
}

type fromKey struct {
	since   uint64
	typeURL string
}

// ChangesFrom is ChangesSince for any earlier result since whose whole set
// of typeURL the caller holds as held (name → content hash; a Set's
// Hashes, read-only): when the results are unrelated (a config change), the
// difference is computed once per (since, type) and shared by every stream
// that holds the same set, instead of each comparing everything.
func (r *ProxyResources) ChangesFrom(since uint64, typeURL string, held map[string]string) *Changes {
	if ch, ok := r.ChangesSince(since, typeURL); ok {
		return ch
	}
	k := fromKey{since, typeURL}
	r.fromMu.Lock()
	defer r.fromMu.Unlock()
	if ch := r.from[k]; ch != nil {
		return ch
	}
	all := r.Resources[typeURL]
	ch := &Changes{}
	for name, p := range all {
		if held[name] != p.Hash {
			ch.Updated = append(ch.Updated, p)
		}
	}
	for name := range held {
		if all[name] == nil {
			ch.Removed = append(ch.Removed, name)
		}
	}
	slices.SortFunc(ch.Updated, compareNames)
	slices.Sort(ch.Removed)
	if r.from == nil || len(r.from) >= 16 {
		r.from = map[fromKey]*Changes{}
	}
	r.from[k] = ch
	return ch
}

// Set is every resource of one type, sorted by name, with its version: what
// a wildcard subscriber receives. Computed once per type and shared by all
// streams of the result; read-only.
type Set struct {
	Sorted  []*Prepared
	Hashes  map[string]string // name -> content hash
	Version string
	sum     versionSum
}

// Set returns the complete set of typeURL.
func (r *ProxyResources) Set(typeURL string) *Set {
	r.setMu.Lock()
	defer r.setMu.Unlock()
	if s := r.sets[typeURL]; s != nil {
		return s
	}
	all := r.Resources[typeURL]
	s := &Set{Sorted: make([]*Prepared, 0, len(all)), Hashes: make(map[string]string, len(all))}
	for _, p := range all {
		s.Sorted = append(s.Sorted, p)
		s.Hashes[p.Name] = p.Hash
		s.sum.toggle(p.Name, p.Hash)
	}
	slices.SortFunc(s.Sorted, compareNames)
	s.Version = s.sum.String()
	r.setSet(typeURL, s)
	return s
}

func (r *ProxyResources) setSet(typeURL string, s *Set) {
	if r.sets == nil {
		r.sets = map[string]*Set{}
	}
	r.sets[typeURL] = s
}

func compareNames(a, b *Prepared) int { return strings.Compare(a.Name, b.Name) }

func compareName(p *Prepared, name string) int { return strings.Compare(p.Name, name) }

// apply returns the set that ch makes of s, in time proportional to the
// set's size for the copies but to the change for sorting and hashing.
func (s *Set) apply(ch *Changes) *Set {
	out := &Set{Sorted: slices.Clone(s.Sorted), Hashes: maps.Clone(s.Hashes), sum: s.sum}
	for _, name := range ch.Removed {
		if old, ok := out.Hashes[name]; ok {
			out.sum.toggle(name, old)
			delete(out.Hashes, name)
			if i, found := slices.BinarySearchFunc(out.Sorted, name, compareName); found {
				out.Sorted = slices.Delete(out.Sorted, i, i+1)
			}
		}
	}
	for _, p := range ch.Updated {
		if old, ok := out.Hashes[p.Name]; ok {
			out.sum.toggle(p.Name, old)
		}
		out.Hashes[p.Name] = p.Hash
		out.sum.toggle(p.Name, p.Hash)
		if i, found := slices.BinarySearchFunc(out.Sorted, p.Name, compareName); found {
			out.Sorted[i] = p
		} else {
			out.Sorted = slices.Insert(out.Sorted, i, p)
		}
	}
	out.Version = out.sum.String()
	return out
}

// SetVersion is the version of a set of resources: a hash of their names
// and content hashes, so equal sets have equal versions. It is the XOR of
// a 128-bit hash of each (name, content hash) pair, so a set that differs
// from another by a few resources gets its version from the other's in
// time proportional to the difference (Set.apply).
func SetVersion(hashes map[string]string) string {
	var v versionSum
	for n, h := range hashes {
		v.toggle(n, h)
	}
	return v.String()
}

// versionSum accumulates SetVersion; toggle adds or removes an entry.
type versionSum [2]uint64

func (v *versionSum) toggle(name, hash string) {
	var buf [256]byte
	b := append(append(append(buf[:0], name...), 0), hash...)
	sum := sha256.Sum256(b)
	v[0] ^= binary.BigEndian.Uint64(sum[0:8])
	v[1] ^= binary.BigEndian.Uint64(sum[8:16])
}

func (v versionSum) String() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], v[0])
	binary.BigEndian.PutUint64(b[8:], v[1])
	return hex.EncodeToString(b[:])
}
