// Package fairshare holds a counting semaphore shared fairly among
// tenants: when its slots are all taken, a freed slot goes to the next
// tenant with a waiter, round robin, and each tenant's waiters are served
// in arrival order. A tenant with a storm of work thus queues behind its
// own work, and a tenant with one item waits for at most one slot per
// other busy tenant (docs/decisions/037-fair-push-work-across-meshes.md).
package fairshare

import "sync"

// Semaphore is a fair counting semaphore. Safe for concurrent use.
type Semaphore struct {
	mu   sync.Mutex
	free int
	// queues holds each tenant's waiters, oldest first; ring lists the
	// tenants with waiters in the order they are served, next is the
	// index in ring of the tenant served next.
	queues map[string][]chan struct{}
	ring   []string
	next   int
}

// New returns a Semaphore of n slots (at least 1).
func New(n int) *Semaphore {
	return &Semaphore{free: max(1, n), queues: map[string][]chan struct{}{}}
}

// Acquire takes a slot for tenant, waiting for its turn if none is free;
// waited reports whether it had to. The returned function frees the slot.
func (s *Semaphore) Acquire(tenant string) (release func(), waited bool) {
	s.mu.Lock()
	if s.free > 0 && len(s.ring) == 0 {
		s.free--
		s.mu.Unlock()
		return s.release, false
	}
	ch := make(chan struct{})
	if len(s.queues[tenant]) == 0 {
		// A tenant that starts waiting is served after every tenant
		// already waiting (it joins the ring just before next).
		s.ring = insertAt(s.ring, s.next, tenant)
		s.next++
		if s.next == len(s.ring) {
			s.next = 0
		}
	}
	s.queues[tenant] = append(s.queues[tenant], ch)
	s.mu.Unlock()
	<-ch
	return s.release, true
}

// release hands the slot to the next tenant's oldest waiter, or frees it.
func (s *Semaphore) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ring) == 0 {
		s.free++
		return
	}
	tenant := s.ring[s.next]
	q := s.queues[tenant]
	ch := q[0]
	if len(q) == 1 {
		delete(s.queues, tenant)
		s.ring = append(s.ring[:s.next], s.ring[s.next+1:]...)
	} else {
		s.queues[tenant] = q[1:]
		s.next++
	}
	if s.next >= len(s.ring) {
		s.next = 0
	}
	close(ch)
}

// Waiting counts the waiters of every tenant.
func (s *Semaphore) Waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, q := range s.queues {
		n += len(q)
	}
	return n
}

func insertAt(ring []string, i int, t string) []string {
	ring = append(ring, "")
	copy(ring[i+1:], ring[i:])
	ring[i] = t
	return ring
}
