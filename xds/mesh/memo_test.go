package mesh

import (
	"runtime"
	"testing"
)

// memoValue holds a pointer (a string), so it is never put in a
// tiny-allocator block with other allocations (a weak pointer to it would
// then outlive it).
type memoValue struct {
	n    int
	note string
}

type memoKey struct{ name string }

// TestMemoWeak: a weakly memoized value is shared while something holds
// it, and computed again once it was freed.
func TestMemoWeak(t *testing.T) {
	s := &Snapshot{}
	calls := 0
	fn := func() *memoValue { calls++; return &memoValue{n: calls, note: "computed"} }

	func() {
		held := MemoWeak(s, memoKey{"a"}, fn)
		if again := MemoWeak(s, memoKey{"a"}, fn); again != held || calls != 1 {
			t.Fatalf("second call while held: got value %d after %d calls, want the first value shared (1 call)", again.n, calls)
		}
		if other := MemoWeak(s, memoKey{"b"}, fn); other == held || calls != 2 {
			t.Fatalf("another key: got value %d after %d calls, want its own (2 calls)", other.n, calls)
		}
	}()

	runtime.GC() // nothing holds key a's value any more: it is freed
	if v := MemoWeak(s, memoKey{"a"}, fn); v == nil || v.n != 3 || calls != 3 {
		t.Fatalf("after the value was freed: got %+v after %d calls, want a new value (3 calls)", v, calls)
	}
}
