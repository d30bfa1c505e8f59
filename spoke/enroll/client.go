package enroll

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/navemesh/nave/shared/retry"
)

// AttemptTimeout bounds one enrollment call, so that a hub that accepts
// the connection but never answers is retried like one that is down.
const AttemptTimeout = 30 * time.Second

// Client gets a spoke's first credentials, waiting while what it needs
// cannot be reached: it reads the credentials store (Load), and enrolls
// with a join token when the store holds none (Enroll), each retried with
// exponential backoff from BackoffInitial to BackoffMax. A Client is used
// by one goroutine at a time.
type Client struct {
	// Options say where the hub is, how to trust it and the store
	// (Options.Store, else Options.StateDir).
	Options Options
	// BackoffInitial and BackoffMax bound the wait between attempts.
	BackoffInitial, BackoffMax time.Duration
	// OnRetry, if set, is told each failure that is retried (why the
	// spoke has no credentials yet).
	OnRetry func(error)
	// Logger receives a line per retry and per enrollment; nil discards.
	Logger *slog.Logger
}

// RefusedError is the hub's answer refusing an enrollment: final, never
// retried.
type RefusedError struct {
	// Address is the hub's.
	Address string
	Status  *status.Status
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("the hub at %s refused to enroll the spoke (%s): %s", e.Address, e.Status.Code(), e.Status.Message())
}

// TokenRefused reports whether the hub refused the join token itself (used,
// expired or unknown): only a new token helps.
func (e *RefusedError) TokenRefused() bool { return e.Status.Code() == codes.Unauthenticated }

func (c *Client) log() *slog.Logger {
	if c.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.Logger
}

func (c *Client) retried(err error) {
	if c.OnRetry != nil {
		c.OnRetry(err)
	}
}

// Load reads the store, retrying while a Secret store's API server cannot
// be reached (the state dir answers at once). ErrNotEnrolled, and any
// other failure, is returned at once.
func (c *Client) Load(ctx context.Context) (*Credentials, error) {
	store := c.Options.store()
	if store == nil {
		return nil, errors.New("enroll: a state dir or store is required")
	}
	b := retry.New(c.BackoffInitial, c.BackoffMax)
	for {
		attempt, cancel := context.WithTimeout(ctx, AttemptTimeout)
		creds, err := store.Load(attempt)
		cancel()
		if err == nil || errors.Is(err, ErrNotEnrolled) || !retriableKube(err) || ctx.Err() != nil {
			return creds, err
		}
		c.retried(err)
		wait := b.NextBackOff()
		c.log().Warn("cannot read the credentials store; retrying", "store", store.String(), "in", wait.Round(time.Millisecond), "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// retriableKube is an API server that could not answer: unreachable
// (client-go's transport errors are *url.Error), overloaded or timing out.
// Forbidden, or a Secret that does not parse, is final.
func retriableKube(err error) bool {
	var ue *url.Error
	return errors.As(err, &ue) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsTooManyRequests(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err)
}

// Enroll redeems token (Enroll), retrying with backoff while the hub is
// unreachable (Unavailable, DeadlineExceeded); the hub refusing, with any
// other code, is a *RefusedError, and a failure before reaching the hub
// (the settings, or the hub's answer) is returned as it is.
func (c *Client) Enroll(ctx context.Context, token string) (*Credentials, error) {
	b := retry.New(c.BackoffInitial, c.BackoffMax)
	for {
		attempt, cancel := context.WithTimeout(ctx, AttemptTimeout)
		creds, err := Enroll(attempt, c.Options, token)
		cancel()
		switch {
		case err == nil:
			leaf := creds.Certificate.Leaf
			c.log().Info("enrolled", "mesh", creds.Mesh, "cluster", creds.Cluster, "trustDomain", creds.TrustDomain,
				"serial", leaf.SerialNumber.Text(16), "notAfter", leaf.NotAfter)
			return creds, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		}
		var gs interface{ GRPCStatus() *status.Status }
		if !errors.As(err, &gs) {
			return nil, err // refused before reaching the hub: the settings or the hub's answer
		}
		st := gs.GRPCStatus()
		switch st.Code() {
		case codes.Unavailable, codes.DeadlineExceeded:
		default:
			return nil, &RefusedError{Address: c.Options.Address, Status: st}
		}
		c.retried(err)
		wait := b.NextBackOff()
		c.log().Warn("hub unreachable or not trusted (TLS handshake); retrying enrollment", "hub", c.Options.Address, "in", wait.Round(time.Millisecond), "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}
