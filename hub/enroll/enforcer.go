package enroll

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/navemesh/nave/hub/ingest"
)

// DefaultEnforceInterval is how often an Enforcer reads the revocations.
const DefaultEnforceInterval = 500 * time.Millisecond

// EnforcerOptions configure an Enforcer.
type EnforcerOptions struct {
	// Interval between two reads of the revocations; 0 is
	// DefaultEnforceInterval.
	Interval time.Duration
	Logger   *slog.Logger
	// Registerer receives nave_hub_enroll_revoked_streams_closed_total;
	// nil registers nowhere.
	Registerer prometheus.Registerer
}

// Enforcer cuts revoked clusters off on this hub replica: their open
// streams closed, their resources withdrawn. It reads the Registry's
// revocations every interval and calls withdraw for every revoked cluster
// each time (level-triggered: a
// stream that authenticated just before a revocation landed is closed at
// the next read, and a revocation written by navectl or another replica
// is enforced here within one interval). It polls rather than watching
// the directory because inotify does not see writes made by other hosts
// on a shared (network) volume.
//
// New streams and renewals of a revoked cluster are refused by the
// CertAuthenticator, which reads the revocation itself. Run is called
// once; withdraw must be safe for concurrent use.
type Enforcer struct {
	reg      Registry
	withdraw func(id ingest.ClusterIdentity, reason string) bool
	interval time.Duration
	log      *slog.Logger
	closed   prometheus.Counter
}

// NewEnforcer returns an Enforcer that cuts clusters off through withdraw
// (normally ingest.Store.Withdraw, with the cluster's Watch streams); it
// reports whether there was anything to cut off.
func NewEnforcer(reg Registry, withdraw func(id ingest.ClusterIdentity, reason string) bool, opts EnforcerOptions) *Enforcer {
	if opts.Interval <= 0 {
		opts.Interval = DefaultEnforceInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Enforcer{reg: reg, withdraw: withdraw, interval: opts.Interval, log: opts.Logger,
		closed: newEnforcerMetrics(opts.Registerer)}
}

// Run enforces revocations until ctx is done, then returns nil. A failed
// read is logged once (until reads work again) and retried.
func (e *Enforcer) Run(ctx context.Context) error {
	t := time.NewTicker(e.interval)
	defer t.Stop()
	failing := false
	for {
		revs, err := e.reg.Revocations(ctx)
		switch {
		case err != nil && !failing:
			e.log.Error("reading revocations failed; retrying", "err", err)
			failing = true
		case err == nil:
			if failing {
				e.log.Info("reading revocations works again")
				failing = false
			}
			for _, r := range revs {
				if e.withdraw(r.Identity(), "cluster "+r.Identity().String()+" is revoked") {
					e.closed.Inc()
					e.log.Warn("revoked cluster's stream closed", "mesh", r.Mesh, "cluster", r.Cluster,
						"revokedAt", r.RevokedAt)
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
