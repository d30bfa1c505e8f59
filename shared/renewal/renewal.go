// Package renewal holds the one certificate renewal of nave, on both sides:
// a Policy says when a certificate is due (a fraction of its lifetime, with
// jitter, and how to back off after a failure), and a Loop renews at that
// time, retries with backoff, and tells when it will renew next (for
// metrics and debug pages).
//
// The default policy renews half way through the lifetime, as Istio's
// agent does (SECRET_GRACE_PERIOD_RATIO 0.5): a failing CA then leaves the
// other half to notice and mend it. Callers keep their own fraction where
// a reason makes it differ (docs/decisions/033-one-home-per-mechanism.md):
//
//   - nave-agent's workload certificates: 50 % plus up to 30 % jitter, set
//     by ra.renewFraction and ra.renewJitter (pods started together by a
//     rollout must not renew together against one spoke);
//   - the spoke's cluster certificate (spoke/enroll): 70 % plus up to 10 %;
//     renewal crosses the network to the hub, spokes enrolled together
//     spread over the last tenth;
//   - the spoke's webhook serving certificate (spoke/webhookcert): 50 %
//     without jitter — its CA rotation is arithmetic on half-way points
//     (decision 012), and each spoke replica signs its own locally;
//   - the hub's certificates (hub/ca.Renewal: its serving and replica
//     certificates, workload certificates it mints for SDS): 80 % without
//     jitter — a renewal is a local mint, made on the handshake that finds
//     the certificate due, so there is neither a herd to spread nor a
//     network to wait for.
package renewal

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/navemesh/nave/shared/retry"
)

// DefaultFraction is the part of the lifetime after which a certificate is
// due under the zero Policy.
const DefaultFraction = 0.5

// Policy says when to renew a certificate and how to retry a failed
// renewal. The zero value renews half way, without jitter, never sooner
// than now, retrying after 1 s growing to 5 min. A Policy is a plain
// value, safe for concurrent use if Rand is.
type Policy struct {
	// Fraction of the lifetime (from its start to NotAfter) after which
	// the certificate is due, in (0, 1); zero or out of range means
	// DefaultFraction.
	Fraction float64
	// Jitter, a fraction of the lifetime, delays renewal by a uniformly
	// random share of it: with Fraction 0.5 and Jitter 0.3 renewal falls
	// between 50 % and 80 %. Fraction + Jitter is kept below 1, so jitter
	// cannot make a certificate expire unrenewed.
	Jitter float64
	// Floor is the shortest wait after a successful renewal before the
	// next (a certificate issued already due must not be renewed in a
	// busy loop).
	Floor time.Duration
	// Retry is the backoff between failed renewals; a zero Initial is
	// 1 s and a zero Max 5 min.
	Retry retry.Policy
	// Rand returns a number in [0, 1); nil means math/rand/v2's Float64.
	Rand func() float64
}

// At returns when a certificate valid from start to notAfter is due. start
// is its NotBefore, or later when the holder knows the certificate only
// from then (a CA backdates NotBefore for clock skew). A certificate with
// no lifetime left at start is due at notAfter (at once). With jitter each
// call draws anew: call it once per certificate and keep the answer.
func (p Policy) At(start, notAfter time.Time) time.Time {
	life := notAfter.Sub(start)
	if life <= 0 {
		return notAfter
	}
	f := p.Fraction
	if f <= 0 || f >= 1 {
		f = DefaultFraction
	}
	if j := min(max(p.Jitter, 0), 1-f); j > 0 {
		r := p.Rand
		if r == nil {
			r = rand.Float64
		}
		f += j * min(max(r(), 0), 1)
	}
	return start.Add(time.Duration(float64(life) * f))
}

// backoff returns the retry waits of p.
func (p Policy) backoff() *retry.Backoff {
	r := p.Retry
	if r.Initial <= 0 {
		r.Initial = time.Second
	}
	if r.Max <= 0 {
		r.Max = 5 * time.Minute
	}
	return r.New()
}

// Renew renews once. It returns when the next renewal is due — usually
// Policy.At of the new certificate, but a caller that watches more than
// one deadline returns the earliest — or the error that makes the Loop
// retry. The Loop calls it from Run's goroutine only, one call at a time.
type Renew func(ctx context.Context) (next time.Time, err error)

// Options configure a Loop; the Loop reads them, never writes them.
type Options struct {
	// Policy gives the Floor after a success and the Retry backoff.
	Policy Policy
	// First is when the first renewal is due; zero means at once.
	First time.Time
	// MaxWait, when positive, bounds every wait: the Loop renews at
	// least that often (a caller that must look again even when nothing
	// is due).
	MaxWait time.Duration
	// Wake, if set, makes the Loop renew at once at each receive.
	Wake <-chan struct{}
	// Failed, if set, is called after each failed renewal with the wait
	// before the next attempt: the caller logs and counts it there.
	Failed func(err error, retryIn time.Duration)
}

// Loop renews a certificate whenever it is due. Call Run once; Next is
// safe for concurrent use.
type Loop struct {
	renew Renew
	opts  Options

	mu   sync.Mutex
	next time.Time
}

// NewLoop returns a Loop that calls renew when due; it does nothing until
// Run.
func NewLoop(renew Renew, opts Options) *Loop {
	return &Loop{renew: renew, opts: opts, next: opts.First}
}

// Next is when the Loop will renew next: after a failure, when it retries.
// Zero until Run has scheduled the first renewal, when that is at once.
func (l *Loop) Next() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next
}

// Run renews at each due time until ctx is done, then returns nil. A
// failed renewal is retried with the Policy's backoff (reset by a
// success); a success waits for the time renew returned, at least the
// Policy's Floor.
func (l *Loop) Run(ctx context.Context) error {
	b := l.opts.Policy.backoff()
	wait := max(time.Until(l.opts.First), 0)
	timer := time.NewTimer(l.bound(wait))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-l.opts.Wake:
		case <-timer.C:
		}
		next, err := l.renew(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			wait = b.NextBackOff()
			if l.opts.Failed != nil {
				l.opts.Failed(err, wait)
			}
		} else {
			b.Reset()
			wait = max(time.Until(next), l.opts.Policy.Floor)
		}
		timer.Reset(l.bound(wait))
	}
}

// bound caps wait at MaxWait and records when it ends.
func (l *Loop) bound(wait time.Duration) time.Duration {
	if m := l.opts.MaxWait; m > 0 {
		wait = min(wait, m)
	}
	wait = max(wait, 0)
	l.mu.Lock()
	l.next = time.Now().Add(wait)
	l.mu.Unlock()
	return wait
}
