// Package debounce holds the one debounce of nave: a burst of events
// becomes one action, taken once the events have been quiet for a while,
// and at the latest a bounded time after the burst's first event. The
// push context (per mesh), the hub's Watch streams (per stream), and the
// spoke's kube and files sources each own one Timer.
//
// The edge is the trailing one: the action waits for the quiet. Where the
// wait is decided (Timer.wait) is the one place a leading edge — act at
// the first event, then hold the rest of the burst — would change.
package debounce

import (
	"sync"
	"time"
)

// Timer debounces events: C receives once Quiet has passed since the last
// Event, or Max since the first Event of the burst, whichever is first. A
// zero Max does not bound the wait; Max equal to Quiet acts a fixed
// window after the first event (later events do not delay it). It is safe
// for concurrent use: Event may be called from any goroutine; one
// goroutine receives from C.
type Timer struct {
	quiet, max time.Duration
	c          chan struct{}

	mu    sync.Mutex
	timer *time.Timer
	first time.Time // first event of the pending burst; zero when idle
	due   time.Time
}

// New returns an idle Timer.
func New(quiet, max time.Duration) *Timer {
	return &Timer{quiet: quiet, max: max, c: make(chan struct{}, 1)}
}

// C receives once per burst, when it is due.
func (d *Timer) C() <-chan struct{} { return d.c }

// Event records an event: it starts a burst, or extends the pending one.
func (d *Timer) Event() {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	if d.first.IsZero() {
		d.first = now
	}
	wait := d.wait(now)
	d.due = now.Add(wait)
	if d.timer == nil {
		d.timer = time.AfterFunc(wait, d.fire)
	} else {
		d.timer.Reset(wait)
	}
}

// wait is how long after now the pending burst acts: Quiet, cut to what is
// left of Max since its first event.
func (d *Timer) wait(now time.Time) time.Duration {
	wait := d.quiet
	if d.max > 0 {
		wait = min(wait, d.first.Add(d.max).Sub(now))
	}
	return max(wait, 0)
}

// Pending reports whether a burst waits to act.
func (d *Timer) Pending() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.first.IsZero()
}

// Stop drops the pending burst, if any: C will not receive for it.
func (d *Timer) Stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil {
		d.timer.Stop()
	}
	d.first = time.Time{}
	select {
	case <-d.c:
	default:
	}
}

func (d *Timer) fire() {
	d.mu.Lock()
	if d.first.IsZero() || time.Now().Before(d.due) {
		// Stopped, or extended by an Event after this firing was
		// scheduled: the timer fires again at the new due time.
		d.mu.Unlock()
		return
	}
	d.first = time.Time{}
	select { // under mu, so that a Stop after this firing drains it
	case d.c <- struct{}{}:
	default: // the previous burst is not taken yet; one receive serves both
	}
	d.mu.Unlock()
}
