// Package retry holds the one backoff of nave: the waits between attempts
// of anything retried until it succeeds — a spoke's uplink dialling the hub,
// the hub dialling a polled spoke (docs/protocol.md), enrollment, a
// certificate renewal (shared/renewal), a replica's relay. Each wait is
// drawn around an interval that grows from Initial by Multiplier and is
// never more than Max: the jitter never overshoots the maximum, so "at most
// Max between attempts" holds (a raw cenkalti ExponentialBackOff jitters
// around its capped interval and waits up to Max × 1.5).
package retry

import (
	"math/rand/v2"
	"time"
)

// Defaults of Policy.
const (
	DefaultMultiplier = 1.5
	DefaultJitter     = 0.5
)

// Policy says how the waits grow. The zero Multiplier and Jitter mean
// DefaultMultiplier and DefaultJitter; a negative Jitter means none (each
// wait is exactly the interval). A Policy is a plain value, safe for
// concurrent use if Rand is.
type Policy struct {
	// Initial is the first interval; Max bounds every wait.
	Initial, Max time.Duration
	// Multiplier grows the interval after each wait.
	Multiplier float64
	// Jitter draws each wait uniformly within interval × (1 ± Jitter),
	// then caps it at Max.
	Jitter float64
	// Rand returns a number in [0, 1); nil means math/rand/v2's Float64.
	Rand func() float64
}

// New returns a Backoff that starts at p.Initial.
func (p Policy) New() *Backoff {
	if p.Multiplier == 0 {
		p.Multiplier = DefaultMultiplier
	}
	if p.Jitter == 0 {
		p.Jitter = DefaultJitter
	}
	p.Jitter = max(p.Jitter, 0)
	if p.Rand == nil {
		p.Rand = rand.Float64
	}
	if p.Max < p.Initial {
		p.Max = p.Initial
	}
	return &Backoff{p: p, interval: p.Initial}
}

// New returns the waits of Policy{Initial: initial, Max: maxWait}: the
// first within initial ± 50 %, each next one 1.5 times the last (± 50 %),
// never more than maxWait.
func New(initial, maxWait time.Duration) *Backoff {
	return Policy{Initial: initial, Max: maxWait}.New()
}

// Backoff is a sequence of waits. Like the counter it is, it is not safe
// for concurrent use: one retry loop owns it.
type Backoff struct {
	p        Policy
	interval time.Duration
}

// NextBackOff returns the next wait (the name matches cenkalti/backoff's
// BackOff, so either fits where the other did).
func (b *Backoff) NextBackOff() time.Duration {
	w := b.interval
	if j := b.p.Jitter; j > 0 {
		w = time.Duration(float64(w) * (1 - j + 2*j*b.p.Rand()))
	}
	b.interval = min(time.Duration(float64(b.interval)*b.p.Multiplier), b.p.Max)
	return min(max(w, 0), b.p.Max)
}

// Reset starts the waits over from Initial (after a success).
func (b *Backoff) Reset() { b.interval = b.p.Initial }
