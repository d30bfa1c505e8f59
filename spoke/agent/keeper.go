package agent

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/navemesh/nave/shared/renewal"
	"github.com/navemesh/nave/shared/retry"
)

// Requester obtains a fresh credential (RAClient.Request).
type Requester interface {
	Request(ctx context.Context) (*Credential, error)
}

// RequesterFunc adapts a function to Requester.
type RequesterFunc func(ctx context.Context) (*Credential, error)

// Request calls f.
func (f RequesterFunc) Request(ctx context.Context) (*Credential, error) { return f(ctx) }

// KeeperOptions configure a Keeper.
type KeeperOptions struct {
	// RenewFraction and RenewJitter place renewal in a certificate's life
	// (renewal.Policy's Fraction and Jitter, see RenewAt).
	RenewFraction, RenewJitter float64
	// RetryInitial and RetryMax bound the waits between failed requests
	// (doubled each time, ± 30 %).
	RetryInitial, RetryMax time.Duration
	// Timeout bounds one request.
	Timeout time.Duration
	// RootsRefresh, when positive, caps the wait before the next request:
	// each answer carries the mesh's current roots, so a root rotation
	// reaches the workload within RootsRefresh (decision 031).
	RootsRefresh time.Duration
	// Rand returns a number in [0,1) for the jitter; nil: math/rand.
	Rand func() float64
	// Publish is called with each new credential, in order, before the
	// Keeper serves it as current; an error is logged, counted and
	// retried like a failed request (the previous credential stays).
	Publish func(*Credential) error
}

// Keeper keeps a workload credential current: it obtains one, publishes
// it, and obtains the next at its renewal time, retrying with backoff and
// keeping the current one until a new one is in place. Safe for concurrent
// use: Current may be called from any goroutine while Run runs.
type Keeper struct {
	req     Requester
	opts    KeeperOptions
	policy  renewal.Policy
	log     *slog.Logger
	metrics *metrics

	mu      sync.Mutex
	cur     *Credential
	renewAt time.Time
	lastErr error
	first   chan struct{} // closed once a credential is in place
}

// NewKeeper returns a Keeper of req's credentials.
func NewKeeper(req Requester, opts KeeperOptions, log *slog.Logger, m *metrics) *Keeper {
	if opts.Rand == nil {
		opts.Rand = jitterSource
	}
	if m == nil {
		m = newMetrics(nil)
	}
	policy := renewal.Policy{Fraction: opts.RenewFraction, Jitter: opts.RenewJitter, Rand: opts.Rand,
		Retry: retry.Policy{Initial: opts.RetryInitial, Max: opts.RetryMax, Multiplier: 2, Jitter: 0.3}}
	return &Keeper{req: req, opts: opts, policy: policy, log: log, metrics: m, first: make(chan struct{})}
}

// Current returns the credential in place (nil before the first), when
// it will be renewed, and the last error since it was obtained.
func (k *Keeper) Current() (*Credential, time.Time, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cur, k.renewAt, k.lastErr
}

// Ready is closed once the first credential is in place.
func (k *Keeper) Ready() <-chan struct{} { return k.first }

// Run keeps the credential current until ctx ends; it returns nil then.
func (k *Keeper) Run(ctx context.Context) error {
	return renewal.NewLoop(k.renew, renewal.Options{Policy: k.policy, Failed: k.failed}).Run(ctx)
}

// renew requests and publishes a credential, puts it in place and returns
// when to renew it.
func (k *Keeper) renew(ctx context.Context) (time.Time, error) {
	cred, err := k.attempt(ctx)
	if err != nil {
		return time.Time{}, err
	}
	at := RenewAt(cred, k.policy)
	if r := k.opts.RootsRefresh; r > 0 && time.Until(at) > r {
		at = time.Now().Add(r)
	}
	k.mu.Lock()
	firstOne := k.cur == nil
	k.cur, k.renewAt, k.lastErr = cred, at, nil
	k.mu.Unlock()
	if firstOne {
		close(k.first)
	}
	k.metrics.expiry.Set(float64(cred.Leaf.NotAfter.Unix()))
	k.metrics.renewals.Inc()
	k.log.Info("workload certificate in place", "identity", cred.Leaf.URIs[0].String(), "serial", cred.Serial(),
		"not_after", cred.Leaf.NotAfter.UTC().Format(time.RFC3339), "renew_at", at.UTC().Format(time.RFC3339))
	return at, nil
}

// failed records a failed request; the Loop retries it in wait.
func (k *Keeper) failed(err error, wait time.Duration) {
	k.metrics.failures.Inc()
	k.mu.Lock()
	k.lastErr = err
	cur := k.cur
	k.mu.Unlock()
	if cur != nil && time.Now().After(cur.Leaf.NotAfter) {
		k.log.Error("workload certificate expired and no new one could be obtained; retrying", "err", err, "retry_in", wait)
	} else {
		k.log.Warn("workload certificate request failed; retrying", "err", err, "retry_in", wait)
	}
}

func (k *Keeper) attempt(ctx context.Context) (*Credential, error) {
	rctx, cancel := context.WithTimeout(ctx, k.opts.Timeout)
	defer cancel()
	cred, err := k.req.Request(rctx)
	if err != nil {
		return nil, err
	}
	if k.opts.Publish != nil {
		if err := k.opts.Publish(cred); err != nil {
			return nil, err
		}
	}
	return cred, nil
}
