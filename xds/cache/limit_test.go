package cache

import (
	"testing"
	"time"
)

// TestGenerationsAreBounded: with MaxConcurrentGenerations slots taken, the
// next generation waits (and is counted as waiting) until one is freed.
func TestGenerationsAreBounded(t *testing.T) {
	c := New(nil, Options{MaxConcurrentGenerations: 2})
	r1, r2 := c.acquire(), c.acquire()
	got := make(chan func())
	go func() { got <- c.acquire() }()
	select {
	case <-got:
		t.Fatal("a third generation started while both slots were taken")
	case <-time.After(100 * time.Millisecond):
	}
	r1()
	var r3 func()
	select {
	case r3 = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("a freed slot was not given to the waiting generation")
	}
	r2()
	r3()
	if n := len(c.gens); n != 0 {
		t.Fatalf("%d slots still taken after every release", n)
	}
}
