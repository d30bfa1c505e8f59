package logging

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Limit returns a handler that passes records to h at most burst at once
// and then one every interval, and drops the others: for logs that a peer
// can provoke at will (a failed TLS handshake per connection). The first
// record passed after some were dropped says how many ("suppressed").
// Handlers derived from it (WithAttrs, WithGroup) share its budget. It is
// safe for concurrent use.
func Limit(h slog.Handler, interval time.Duration, burst int) slog.Handler {
	return &limited{h: h, st: &limitState{lim: rate.NewLimiter(rate.Every(interval), burst)}}
}

type limited struct {
	h  slog.Handler
	st *limitState
}

type limitState struct {
	lim     *rate.Limiter
	dropped atomic.Int64
}

func (l *limited) Enabled(ctx context.Context, level slog.Level) bool { return l.h.Enabled(ctx, level) }

func (l *limited) Handle(ctx context.Context, r slog.Record) error {
	if !l.st.lim.Allow() {
		l.st.dropped.Add(1)
		return nil
	}
	if n := l.st.dropped.Swap(0); n > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int64("suppressed", n))
	}
	return l.h.Handle(ctx, r)
}

func (l *limited) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &limited{h: l.h.WithAttrs(attrs), st: l.st}
}

func (l *limited) WithGroup(name string) slog.Handler {
	return &limited{h: l.h.WithGroup(name), st: l.st}
}
