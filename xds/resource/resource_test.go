package resource

import (
	"fmt"
	"testing"
)

// TestChangesSinceSpansSteps: a result derived over several steps reports,
// from any of its last historyDepth ancestors, the union of what changed,
// as it holds it now (updated) or gone (removed).
func TestChangesSinceSpansSteps(t *testing.T) {
	const typeURL = "t"
	p := func(name, hash string) *Prepared { return &Prepared{Name: name, Hash: hash} }
	r0 := &ProxyResources{id: newResults(), Resources: map[string]map[string]*Prepared{typeURL: {"a": p("a", "1"), "b": p("b", "1"), "c": p("c", "1")}}}
	// derive replaces a type wholesale unless it is the endpoint type:
	// mimic it with steps built by hand.
	step := func(base *ProxyResources, next map[string]*Prepared, ch *Changes) *ProxyResources {
		r := &ProxyResources{id: newResults(), Resources: map[string]map[string]*Prepared{typeURL: next}}
		r.steps = append([]step{{base: base.id, changes: map[string]*Changes{typeURL: ch}}}, base.steps...)
		return r
	}
	b2 := p("b", "2")
	r1 := step(r0, map[string]*Prepared{"a": r0.Resources[typeURL]["a"], "b": b2, "c": r0.Resources[typeURL]["c"]}, &Changes{Updated: []*Prepared{b2}})
	d1 := p("d", "1")
	r2 := step(r1, map[string]*Prepared{"a": r0.Resources[typeURL]["a"], "b": b2, "d": d1}, &Changes{Updated: []*Prepared{d1}, Removed: []string{"c"}})
	ch, ok := r2.ChangesSince(r0.id, typeURL)
	if !ok {
		t.Fatal("changes since two steps back are unknown")
	}
	var got []string
	for _, u := range ch.Updated {
		got = append(got, u.Name+u.Hash)
	}
	if fmt.Sprint(got, ch.Removed) != "[b2 d1] [c]" {
		t.Errorf("changes since r0: updated %v removed %v, want [b2 d1] [c]", got, ch.Removed)
	}
	if ch, ok := r2.ChangesSince(r2.id, typeURL); !ok || !ch.Empty() {
		t.Error("a result differs from itself")
	}
	if _, ok := r2.ChangesSince(12345678, typeURL); ok {
		t.Error("changes since an unrelated result are claimed known")
	}
}

// TestChangesFromAnUnrelatedResult: the difference from a held set is what
// the result holds differently or no longer, computed once per (since,
// type) and shared.
func TestChangesFromAnUnrelatedResult(t *testing.T) {
	const typeURL = "t"
	p := func(name, hash string) *Prepared { return &Prepared{Name: name, Hash: hash} }
	r := &ProxyResources{id: newResults(), Resources: map[string]map[string]*Prepared{typeURL: {"a": p("a", "1"), "b": p("b", "2"), "d": p("d", "1")}}}
	held := map[string]string{"a": "1", "b": "1", "c": "1"}
	ch := r.ChangesFrom(4242, typeURL, held)
	var got []string
	for _, u := range ch.Updated {
		got = append(got, u.Name+u.Hash)
	}
	if fmt.Sprint(got, ch.Removed) != "[b2 d1] [c]" {
		t.Errorf("changes from the held set: updated %v removed %v, want [b2 d1] [c]", got, ch.Removed)
	}
	if again := r.ChangesFrom(4242, typeURL, held); again != ch {
		t.Error("the difference from the same result was computed again")
	}
	if self := r.ChangesFrom(r.id, typeURL, nil); !self.Empty() {
		t.Error("a result differs from itself")
	}
}
