package ads

import (
	"encoding/binary"
	"hash/maphash"
	"runtime"
	"slices"
	"sync"
	"weak"

	"google.golang.org/protobuf/encoding/protowire"
)

// nameSet is one state-of-the-world subscription: the names a request
// lists, in the order the proxy sent them, and as a set. It is immutable
// once made, and streams whose requests list the same names share one: an
// Envoy sidecar lists every EDS cluster it holds in each request, and
// sidecars with one view list the same ones, so a thousand-name
// subscription costs each stream a pointer instead of its own strings and
// map.
type nameSet struct {
	list     []string
	set      map[string]bool
	wildcard bool // the list holds "*"
	// wire is list as a request encodes it: one run of field 3
	// (resource_names), which the codec compares a request's run with.
	wire []byte
}

// nameSets interns nameSets by content. An entry lives as long as a
// stream holds it (weak pointers; a cleanup drops the emptied entries).
// It is safe for concurrent use.
type nameSets struct {
	seed maphash.Seed
	mu   sync.Mutex
	m    map[uint64][]weak.Pointer[nameSet] // by hashNames
	// runs is the same sets by runKey of their wire, where the codec
	// looks a request's run up.
	runs map[uint64][]weak.Pointer[nameSet]
}

// sharedNames interns the subscriptions of every stream of every server
// in the process (content-keyed, so sharing them is safe), which lets the
// codec find a request's names before decoding them (unmarshalRequest).
var sharedNames = newNameSets()

func newNameSets() *nameSets {
	return &nameSets{seed: maphash.MakeSeed(), m: map[uint64][]weak.Pointer[nameSet]{}, runs: map[uint64][]weak.Pointer[nameSet]{}}
}

// get returns the nameSet of names, shared with every stream that holds
// one of the same list. It keeps names (the caller no longer changes it).
func (n *nameSets) get(names []string) *nameSet {
	sum := n.hashNames(names)
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, wp := range n.m[sum] {
		if s := wp.Value(); s != nil && slices.Equal(s.list, names) {
			return s
		}
	}
	s := &nameSet{list: names, set: make(map[string]bool, len(names)), wire: encodeNames(names)}
	for _, name := range names {
		if name == "*" {
			s.wildcard = true
			continue
		}
		s.set[name] = true
	}
	wp := weak.Make(s)
	n.m[sum] = append(n.m[sum], wp)
	runtime.AddCleanup(s, n.prune, sum)
	rk := n.runKey(s.wire)
	if len(n.runs[rk]) < runsPerKey {
		n.runs[rk] = append(n.runs[rk], wp)
		runtime.AddCleanup(s, n.pruneRuns, rk)
	}
	return s
}

// runsPerKey bounds the subscriptions registered under one run key.
// Lists alike in length and in every sampled window but different
// elsewhere (by chance, or made so by a proxy that wants every ACK
// compared with hundreds of 45 KB runs) share a key; past this many, a
// list is not registered for the codec, and requests listing it are
// decoded as usual (encodedIn finds nothing): correct, only slower.
const runsPerKey = 8

// runSamples and runSample: runKey hashes a run's length and
// runSamples windows of runSample bytes spread over it (the whole run
// when it is shorter), not all of it: an EDS ACK's run is 45 KB, and the
// sets a key collects are told apart by comparing bytes (encodedIn).
const (
	runSamples = 8
	runSample  = 16
)

// runKey is the key of an encoded run of names in runs.
func (n *nameSets) runKey(run []byte) uint64 {
	var h maphash.Hash
	h.SetSeed(n.seed)
	var size [8]byte
	binary.LittleEndian.PutUint64(size[:], uint64(len(run)))
	h.Write(size[:])
	if len(run) <= runSamples*runSample {
		h.Write(run)
		return h.Sum64()
	}
	step := (len(run) - runSample) / (runSamples - 1)
	for i := range runSamples {
		h.Write(run[i*step : i*step+runSample])
	}
	return h.Sum64()
}

// hashNames is the hash of encodeNames(names), written piece by piece: a
// stream's first request for a subscription others hold allocates nothing.
func (n *nameSets) hashNames(names []string) uint64 {
	var h maphash.Hash
	h.SetSeed(n.seed)
	var head [2 * binary.MaxVarintLen64]byte
	for _, name := range names {
		b := protowire.AppendTag(head[:0], resourceNamesField, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(len(name)))
		h.Write(b)
		h.WriteString(name)
	}
	return h.Sum64()
}

// encodeNames is names as a request's resource_names field encodes them.
func encodeNames(names []string) []byte {
	size := 0
	for _, name := range names {
		size += protowire.SizeTag(resourceNamesField) + protowire.SizeBytes(len(name))
	}
	b := make([]byte, 0, size)
	for _, name := range names {
		b = protowire.AppendTag(b, resourceNamesField, protowire.BytesType)
		b = protowire.AppendString(b, name)
	}
	return b
}

// prune drops the entries of hash sum whose nameSet is gone, and
// pruneRuns those of run key sum.
func (n *nameSets) prune(sum uint64) { n.pruneIn(n.m, sum) }

func (n *nameSets) pruneRuns(sum uint64) { n.pruneIn(n.runs, sum) }

func (n *nameSets) pruneIn(m map[uint64][]weak.Pointer[nameSet], sum uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	live := slices.DeleteFunc(m[sum], func(wp weak.Pointer[nameSet]) bool { return wp.Value() == nil })
	if len(live) == 0 {
		delete(m, sum)
	} else {
		m[sum] = live
	}
}
