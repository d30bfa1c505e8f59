package cache

import (
	"testing"
	"testing/synctest"
)

// TestGenerationsAreBounded: with MaxConcurrentGenerations slots taken, the
// next generation waits (and is counted as waiting) until one is freed.
func TestGenerationsAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := New(nil, Options{MaxConcurrentGenerations: 2})
		r1, r2 := c.acquire("a"), c.acquire("b")
		got := make(chan func())
		go func() { got <- c.acquire("a") }()
		synctest.Wait()
		select {
		case <-got:
			t.Fatal("a third generation started while both slots were taken")
		default:
		}
		if n := c.gens.Waiting(); n != 1 {
			t.Fatalf("%d generations waiting, want 1", n)
		}
		r1()
		r3 := <-got
		r2()
		r3()
		// Every slot is free again: two generations start without waiting.
		for _, m := range []string{"a", "b"} {
			if _, waited := c.gens.Acquire(m); waited {
				t.Fatal("a slot was still taken after every release")
			}
		}
	})
}
