// Package reconnect holds the waits between attempts to re-establish a
// spoke↔hub sync stream, whichever side dials: a spoke's uplink dialling
// the hub (push mode) or the hub dialling a polled spoke (docs/protocol.md).
package reconnect

import (
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Backoff returns the waits between attempts: the first within initial ±
// 50 %, each next one 1.5 times the last (± 50 %), never more than
// maxWait. Reset starts over. Like any backoff.BackOff it is not safe for
// concurrent use.
func Backoff(initial, maxWait time.Duration) backoff.BackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = initial
	b.MaxInterval = maxWait
	b.RandomizationFactor = 0.5
	b.MaxElapsedTime = 0
	b.Reset()
	return capped{b}
}

// capped clamps each wait of an ExponentialBackOff to its MaxInterval: the
// library caps the interval it jitters around, so at the cap it would wait
// up to MaxInterval × (1 + RandomizationFactor).
type capped struct{ *backoff.ExponentialBackOff }

func (b capped) NextBackOff() time.Duration {
	return min(b.ExponentialBackOff.NextBackOff(), b.MaxInterval)
}
