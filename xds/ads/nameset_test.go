package ads

import (
	"runtime"
	"testing"
	"time"
	"weak"
)

// Streams listing the same names share one nameSet; one no stream holds
// any more is dropped from the table.
func TestNameSetsShareAndForget(t *testing.T) {
	sets := newNameSets()
	a := sets.get([]string{"x", "y", "*"})
	b := sets.get([]string{"x", "y", "*"})
	if a != b {
		t.Error("two equal lists got two sets")
	}
	if !a.wildcard || len(a.set) != 2 || !a.set["x"] || !a.set["y"] {
		t.Errorf("set of [x y *] = %+v", a)
	}
	if c := sets.get([]string{"y", "x", "*"}); c == a {
		t.Error("a list in another order shares the set (its ACK comparison would fail)")
	}
	if got := sets.len(); got != 4 {
		t.Errorf("%d entries, want 4 (two sets, each by its names and by its run)", got)
	}
	runtime.KeepAlive(a)
	a, b = nil, nil
	// Cleanups run after a GC frees the sets; wait for them.
	deadline := time.Now().Add(10 * time.Second)
	for sets.len() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d entries left after their sets became unreachable", sets.len())
		}
		runtime.GC()
		runtime.Gosched()
	}
}

// A SotW subscription shares the interned set, reports changes as the map
// did, and keeps the legacy wildcard of an empty first request.
func TestSubscribeShared(t *testing.T) {
	sets := newNameSets()
	var p, q typeState
	if !p.subscribe(sets, nil, true) || !p.wildcard {
		t.Fatal("an empty first request is not the wildcard")
	}
	if !p.subscribe(sets, []string{"a", "b"}, false) || p.wildcard {
		t.Error("naming resources after the wildcard is no change, or keeps the wildcard")
	}
	if p.subscribe(sets, []string{"a", "b"}, false) {
		t.Error("the same list again is a change")
	}
	q.subscribe(sets, []string{"a", "b"}, true)
	if q.sub != p.sub {
		t.Error("two streams naming the same list do not share it")
	}
	if p.subscribe(sets, []string{"b", "a"}, false) {
		t.Error("the same names in another order is a change")
	}
	if !p.subscribe(sets, []string{"a"}, false) || len(p.names) != 1 {
		t.Errorf("dropping a name: names %v", p.names)
	}
	if len(q.names) != 2 {
		t.Errorf("another stream's subscription changed with p's: %v", q.names)
	}
}

// Delta subscriptions to the same names share one set, whatever order
// and requests they came in; a change copies it, leaving the others'.
func TestSubscribeDeltaShared(t *testing.T) {
	sets := newNameSets()
	newState := func() *typeState {
		return &typeState{names: map[string]bool{}, sentHashes: map[string]string{}, absent: map[string]bool{}}
	}
	p, q := newState(), newState()
	if !p.subscribeDelta(sets, []string{"a", "b"}, nil, true) || p.wildcard {
		t.Fatal("subscribing two names is no change, or the wildcard")
	}
	q.subscribeDelta(sets, []string{"b"}, nil, true)
	if !q.subscribeDelta(sets, []string{"a"}, nil, false) {
		t.Error("a new name is no change")
	}
	if p.sub == nil || q.sub != p.sub {
		t.Fatal("two streams subscribed to the same names do not share them")
	}
	if p.subscribeDelta(sets, []string{"a"}, nil, false) {
		t.Error("subscribing a held name again is a change")
	}
	p.sentHashes["b"] = "h"
	p.subscribeDelta(sets, nil, []string{"b"}, false)
	if len(p.names) != 1 || !p.names["a"] || p.sentHashes["b"] != "" {
		t.Errorf("after unsubscribing b: names %v, held %v", p.names, p.sentHashes)
	}
	if len(q.names) != 2 {
		t.Errorf("another stream's subscription changed with p's: %v", q.names)
	}
}

// len counts the interned entries in both indexes (for tests).
func (n *nameSets) len() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := 0
	for _, m := range []map[uint64][]weak.Pointer[nameSet]{n.m, n.runs} {
		for _, l := range m {
			c += len(l)
		}
	}
	return c
}
