package load

import (
	"math/bits"
	"sync"
)

// names interns resource names: every proxy of a run refers to a name by
// one small integer, so that what a proxy holds is a bitset, not a map of
// strings (500 proxies × 17,000 resources would be 8.5 million map
// entries). Safe for concurrent use.
type names struct {
	mu   sync.RWMutex
	ids  map[string]int32
	list []string
}

func newNames() *names { return &names{ids: map[string]int32{}} }

// id returns the id of the name b holds, adding it if new.
func (n *names) id(b []byte) int32 {
	n.mu.RLock()
	id, ok := n.ids[string(b)]
	n.mu.RUnlock()
	if ok {
		return id
	}
	return n.add(string(b))
}

// idString is id for a string.
func (n *names) idString(s string) int32 {
	n.mu.RLock()
	id, ok := n.ids[s]
	n.mu.RUnlock()
	if ok {
		return id
	}
	return n.add(s)
}

func (n *names) add(s string) int32 {
	n.mu.Lock()
	defer n.mu.Unlock()
	if id, ok := n.ids[s]; ok {
		return id
	}
	id := int32(len(n.list))
	n.ids[s] = id
	n.list = append(n.list, s)
	return id
}

// name returns the name of id.
func (n *names) name(id int32) string {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.list[id]
}

// bitset is a growable set of small non-negative integers.
type bitset []uint64

func (b *bitset) set(i int32) {
	w := int(i >> 6)
	if w >= len(*b) {
		*b = append(*b, make([]uint64, w+1-len(*b))...)
	}
	(*b)[w] |= 1 << (uint(i) & 63)
}

func (b bitset) has(i int32) bool {
	w := int(i >> 6)
	return w < len(b) && b[w]&(1<<(uint(i)&63)) != 0
}

func (b bitset) clear(i int32) {
	if w := int(i >> 6); w < len(b) {
		b[w] &^= 1 << (uint(i) & 63)
	}
}

func (b bitset) count() int {
	n := 0
	for _, w := range b {
		n += bits.OnesCount64(w)
	}
	return n
}

// minus counts the members of b not in o.
func (b bitset) minus(o bitset) int {
	n := 0
	for i, w := range b {
		if i < len(o) {
			w &^= o[i]
		}
		n += bits.OnesCount64(w)
	}
	return n
}

// subsetOf reports whether every member of b is in o or in p.
func (b bitset) subsetOf(o, p bitset) bool {
	for i, w := range b {
		if i < len(o) {
			w &^= o[i]
		}
		if i < len(p) {
			w &^= p[i]
		}
		if w != 0 {
			return false
		}
	}
	return true
}

// equal reports whether b and o have the same members.
func (b bitset) equal(o bitset) bool {
	for i := range max(len(b), len(o)) {
		var x, y uint64
		if i < len(b) {
			x = b[i]
		}
		if i < len(o) {
			y = o[i]
		}
		if x != y {
			return false
		}
	}
	return true
}

// intersect keeps only the members also in o.
func (b bitset) intersect(o bitset) {
	for i := range b {
		if i < len(o) {
			b[i] &= o[i]
		} else {
			b[i] = 0
		}
	}
}

// each calls fn for every member, in increasing order.
func (b bitset) each(fn func(int32)) {
	for i, w := range b {
		for w != 0 {
			t := bits.TrailingZeros64(w)
			fn(int32(i<<6 + t))
			w &= w - 1
		}
	}
}
