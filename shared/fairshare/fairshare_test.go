package fairshare

import (
	"slices"
	"testing"
	"testing/synctest"
)

// TestRoundRobin: with one slot taken, three waiters of a and then one of
// b are served a, b, a, a: b's one item waits behind one of a's, not all
// of them.
func TestRoundRobin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(1)
		release, waited := s.Acquire("a")
		if waited {
			t.Fatal("the first Acquire waited")
		}
		served := make(chan string, 4)
		for _, w := range []string{"a1", "a2", "a3", "b1"} {
			go func() {
				r, _ := s.Acquire(w[:1])
				served <- w
				r()
			}()
			synctest.Wait() // w waits before the next one starts
		}
		if n := s.Waiting(); n != 4 {
			t.Fatalf("Waiting = %d, want 4", n)
		}
		release()
		var got []string
		for range 4 {
			got = append(got, <-served)
		}
		if want := []string{"a1", "b1", "a2", "a3"}; !slices.Equal(got, want) {
			t.Fatalf("served %v, want %v", got, want)
		}
		if r, waited := s.Acquire("c"); waited {
			t.Fatal("a free slot made Acquire wait")
		} else {
			r()
		}
	})
}

// TestSlots: n slots are taken without waiting, the next waits.
func TestSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(2)
		r1, _ := s.Acquire("a")
		r2, _ := s.Acquire("b")
		done := make(chan bool)
		go func() {
			r, waited := s.Acquire("a")
			r()
			done <- waited
		}()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("a third Acquire of two slots did not wait")
		default:
		}
		r2()
		if !<-done {
			t.Fatal("waited = false")
		}
		r1()
	})
}
