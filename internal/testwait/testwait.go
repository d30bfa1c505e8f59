// Package testwait is how nave's tests wait for something to happen: they
// poll a condition every Interval until it holds, and fail the test, with
// the condition's last error, once a deadline has passed. The deadline
// catches a hang; it is never a performance threshold, and a passing test
// never comes near it (see STYLE: a benchmark is not a timed test).
//
// The rules this package stands for, in every test of the tree:
//
//   - A test waits on the event, never on the clock: no time.Sleep in a
//     _test.go file. `make lint` (internal/sleepcheck) refuses one outside
//     a synctest bubble unless internal/sleepcheck/allowlist.txt lists it
//     with why it is not a wait.
//   - A timer-driven unit (a debounce, a backoff, a renewal) runs in a
//     testing/synctest bubble, whose fake clock makes its timers instant and
//     exact; there time.Sleep advances the fake clock and synctest.Wait
//     waits until every goroutine of the bubble is blocked.
//   - "Nothing happened" is proven by a later event that would have come
//     after it, never by waiting a while: after the change that must not be
//     pushed, make a marker change and wait until the client has the marker;
//     then check that it received the marker alone. Likewise, "it did not
//     dial while not the owner" waits until the owner check has answered
//     "no" a few more times.
//   - Anything a test reads after observing an event that is updated after
//     that event (a counter, a status, an ACK) is awaited too.
//
// Call For and Until from the test's goroutine (they end the test with
// t.Fatal); Poll, which returns an error, is for everywhere else.
package testwait

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Interval is how often a condition is polled.
const Interval = 10 * time.Millisecond

// Timeout bounds Until: generous, so that a slow or loaded machine never
// fails a test that would pass, and a hang still ends.
const Timeout = 30 * time.Second

// For polls fn every Interval until it returns nil; once timeout has
// passed it fails the test with fn's last error.
func For(t testing.TB, timeout time.Duration, fn func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := Poll(ctx, fn); err != nil {
		t.Fatalf("not within %s: %v", timeout, err)
	}
}

// Until polls cond every Interval until it holds; once Timeout has passed
// it fails the test saying what it waited for.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	For(t, Timeout, func() error {
		if !cond() {
			return errors.New(what)
		}
		return nil
	})
}

// Poll calls fn every Interval until it returns nil (Poll returns nil) or
// ctx ends (Poll returns fn's last error).
func Poll(ctx context.Context, fn func() error) error {
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	for {
		err := fn()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-tick.C:
		}
	}
}
