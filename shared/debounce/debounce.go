// Package debounce holds the one debounce of nave: a burst of events
// becomes few actions, and an event is acted on at the latest a bounded
// time after it arrived. The push context (per mesh), the hub's Watch
// streams (per stream), and the spoke's kube and files sources each own
// one Timer.
//
// A Timer has an edge. On the trailing edge a burst acts once, when the
// events have been quiet for a while. On the leading edge the first event
// after a quiet period acts at once, and the events that follow it within
// the quiet period are held and act together on the trailing edge: a
// single change is not delayed, a burst still costs two actions. Where
// the wait is decided (Timer.wait) is the one place the edges differ.
package debounce

import (
	"fmt"
	"sync"
	"time"
)

// Edge is when a Timer acts on the first event of a burst.
type Edge string

const (
	// Trailing waits for the burst's quiet: an event acts once Quiet has
	// passed without events (or Max after the first). The zero Edge is
	// Trailing.
	Trailing Edge = "trailing"
	// Leading acts on an event at once when nothing happened (no event,
	// no action) for Quiet before it; events within Quiet of an action
	// are held and act as Trailing would.
	Leading Edge = "leading"
)

// Validate reports an error for anything but Leading, Trailing or the
// zero Edge.
func (e Edge) Validate() error {
	switch e {
	case "", Leading, Trailing:
		return nil
	}
	return fmt.Errorf("must be %s or %s, got %q", Leading, Trailing, string(e))
}

// Timer debounces events: C receives once Quiet has passed since the last
// held Event, or Max since the first held Event, whichever is first; on
// the Leading edge, an Event after Quiet without events or actions is not
// held: C receives at once. A zero Max does not bound the wait; Max equal
// to Quiet acts a fixed window after the first held event (later events
// do not delay it). It is safe for concurrent use: Event may be called
// from any goroutine; one goroutine receives from C.
type Timer struct {
	edge       Edge
	quiet, max time.Duration
	c          chan struct{}

	mu    sync.Mutex
	timer *time.Timer
	first time.Time // first held event; zero when none is held
	due   time.Time
	acted time.Time // when C last received; zero before
}

// New returns an idle Timer acting on edge ("" is Trailing).
func New(edge Edge, quiet, max time.Duration) *Timer {
	if edge == "" {
		edge = Trailing
	}
	return &Timer{edge: edge, quiet: quiet, max: max, c: make(chan struct{}, 1)}
}

// C receives once per action: for each held burst when it is due, and on
// the Leading edge at once for an event after a quiet period.
func (d *Timer) C() <-chan struct{} { return d.c }

// Event records an event: it acts at once, starts a held burst, or
// extends the held one.
func (d *Timer) Event() {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	starts := d.first.IsZero()
	if starts {
		d.first = now
	}
	wait := d.wait(now, starts)
	d.due = now.Add(wait)
	if wait == 0 {
		if d.timer != nil {
			d.timer.Stop()
		}
		d.act(now)
		return
	}
	if d.timer == nil {
		d.timer = time.AfterFunc(wait, d.fire)
	} else {
		d.timer.Reset(wait)
	}
}

// wait is how long after now the held events act, now that one more
// arrived (starts: the first one held): on the Leading edge nothing, for
// the first event after Quiet without events or actions; else Quiet, cut
// to what is left of Max since the first held event.
func (d *Timer) wait(now time.Time, starts bool) time.Duration {
	if d.edge == Leading && starts && (d.acted.IsZero() || now.Sub(d.acted) >= d.quiet) {
		return 0
	}
	wait := d.quiet
	if d.max > 0 {
		wait = min(wait, d.first.Add(d.max).Sub(now))
	}
	return max(wait, 0)
}

// Pending reports whether held events wait to act.
func (d *Timer) Pending() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.first.IsZero()
}

// Stop drops the held events, if any: C will not receive for them.
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
	defer d.mu.Unlock()
	now := time.Now()
	if d.first.IsZero() || now.Before(d.due) {
		// Stopped, acted on, or extended by an Event after this firing
		// was scheduled: the timer fires again at the new due time.
		return
	}
	d.act(now)
}

// act makes C receive; d.mu is held (so that a Stop after it drains it).
func (d *Timer) act(now time.Time) {
	d.first, d.acted = time.Time{}, now
	select {
	case d.c <- struct{}{}:
	default: // the previous action is not taken yet; one receive serves both
	}
}
