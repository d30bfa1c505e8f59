package uplink

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/grpcpeer"
)

// StateWaitingHub is the state of a polled uplink (Options.Polled) that
// holds no stream: it waits for the hub to dial it.
const StateWaitingHub = "waiting-for-hub"

// errPollSuperseded ends a Poll stream when the hub opens a newer one.
var errPollSuperseded = errors.New("superseded by a newer Poll stream")

// errPollEnded ends a Poll stream when the spoke stops.
var errPollEnded = errors.New("the spoke is stopping")

// poll is the Poll stream being served.
type poll struct {
	cancel context.CancelCauseFunc
	done   chan struct{}
	by     string
	since  time.Time
}

// Poll serves a hub's Poll stream (polled mode, protocolv1.PolledServer):
// exactly what Run does on a Push stream it dials — the full state, the
// synced marker, then deltas — on a stream the hub dialled. The spoke names
// itself in the response header. One stream is served at a time: a newer
// one supersedes the older (which ends with Aborted), so two hubs (or two
// replicas) never both hold the spoke's state as current. The TLS layer
// has authenticated the hub (spoke/enroll's PolledTLS) before Poll runs.
// Until the source has published its initial state, Poll waits for it.
func (u *Uplink) Poll(ps protocolv1.Polled_PollServer) error {
	ctx := ps.Context()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-u.first:
	}
	if err := ps.SendHeader(u.streamMetadata()); err != nil {
		return err
	}
	by := polledBy(ctx)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	p := &poll{cancel: cancel, done: make(chan struct{}), by: by, since: time.Now()}
	defer close(p.done)
	u.mu.Lock()
	old := u.poll
	u.poll = p
	u.mu.Unlock()
	if old != nil {
		old.cancel(errPollSuperseded)
		<-old.done // one stream at a time consumes the change notifications
	}
	u.log.Info("polled by the hub", "hub", by)
	u.setState(StateSyncing, nil)
	_, err := u.run(ctx, ps)
	u.mu.Lock()
	current := u.poll == p
	if current {
		u.poll = nil
	}
	u.mu.Unlock()
	cause := context.Cause(ctx)
	if current {
		u.setState(StateWaitingHub, err)
		if !errors.Is(cause, errPollEnded) {
			u.metrics.reconnects.Inc()
			u.log.Warn("hub poll stream lost; waiting for the hub to dial again", "hub", by, "err", err)
		}
	}
	switch {
	case errors.Is(cause, errPollSuperseded):
		u.log.Info("poll stream superseded by a newer one", "hub", by)
		return status.Error(codes.Aborted, cause.Error())
	case errors.Is(cause, errPollEnded):
		return status.Error(codes.Unavailable, cause.Error())
	}
	if ctx.Err() != nil && ps.Context().Err() != nil {
		return nil // the hub went away
	}
	return err
}

// PollWatch serves the Watch stream a hub opens beside its Poll stream
// (protocolv1.PolledServer): the spoke subscribes to the rest of its mesh
// as it does on a Watch stream it dials, and keeps the view (Options.View)
// up to date and saved. Without a view (fallback and injection off) it answers
// Unimplemented. The hub ends it with the Poll stream it belongs to (when
// a newer Poll stream supersedes that one, or the spoke stops).
func (u *Uplink) PollWatch(ws protocolv1.Polled_PollWatchServer) error {
	if u.opts.View == nil {
		return status.Error(codes.Unimplemented, "this spoke keeps no remote view (fallback and injection are off)")
	}
	if err := ws.SendHeader(u.streamMetadata()); err != nil {
		return err
	}
	u.setWatch(WatchSubscribing, nil)
	err := u.runWatch(ws)
	u.optionalTypeRefused(err) // the hub's next PollWatch then leaves it out
	if ws.Context().Err() == nil {
		u.setWatch(WatchDown, err)
	}
	return err
}

// EndPoll ends the Poll stream being served, if any (the spoke is
// stopping): its handler returns at once rather than holding a graceful
// server stop until the hub goes away.
func (u *Uplink) EndPoll() {
	u.mu.Lock()
	p := u.poll
	u.mu.Unlock()
	if p != nil {
		p.cancel(errPollEnded) // the hub then closes the PollWatch stream too
	}
}

// polledBy names the hub that dialled: its certificate's SPIFFE ID, if it
// presented one, and its address.
func polledBy(ctx context.Context) string {
	addr := grpcpeer.Addr(ctx)
	p, ok := peer.FromContext(ctx)
	if !ok {
		return addr
	}
	if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 {
		if uris := info.State.PeerCertificates[0].URIs; len(uris) == 1 {
			return uris[0].String() + " at " + addr
		}
	}
	return addr
}

// hubName names the hub for logs: the address the spoke dials, or the hub
// that polls it.
func (u *Uplink) hubName() string {
	if !u.opts.Polled {
		return u.opts.Address
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.poll != nil {
		return u.poll.by
	}
	return ""
}

// RefusedHub counts and logs a caller of the Poll listener that failed the
// TLS handshake because it is not the hub (enroll.Renewer.PolledTLS).
func (u *Uplink) RefusedHub(err error) {
	u.metrics.pollRefused.Inc()
	u.log.Warn("poll connection refused", "reason", err)
}
