// Package handshake counts, and logs rate-limited, the TLS handshakes that
// fail on the binaries' listeners: gRPC listeners through Credentials,
// HTTP servers through ErrorLog (which also routes every other error of
// net/http's server to the structured log). A peer can fail a handshake
// per connection at will, so no failure may cost a log line each.
package handshake

import (
	"log"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/credentials"

	"github.com/navemesh/nave/shared/logging"
)

// Log budget: a burst, then one line a second; the rest are counted only.
const (
	logBurst    = 10
	logInterval = time.Second
)

// Failures counts failed handshakes per listener in
// nave_tls_handshake_failures_total and logs them through a rate-limited
// logger. It is safe for concurrent use.
type Failures struct {
	counter *prometheus.CounterVec
	log     *slog.Logger
}

// New returns Failures logging to logger (none when nil) and registered on
// reg (none when nil); it panics if the metric is registered already.
func New(logger *slog.Logger, reg prometheus.Registerer) *Failures {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_tls_handshake_failures_total",
		Help: "TLS handshakes that failed, by listener (the config key of the address it listens on)."}, []string{"listener"})
	if reg != nil {
		reg.MustRegister(c)
	}
	return &Failures{counter: c, log: slog.New(logging.Limit(logger.Handler(), logInterval, logBurst))}
}

// listen returns the counter of listener, created at zero so that it is
// exported before the first failure.
func (f *Failures) listen(listener string) prometheus.Counter {
	return f.counter.WithLabelValues(listener)
}

func (f *Failures) failed(c prometheus.Counter, listener, peer string, err error) {
	c.Inc()
	f.log.Warn("tls handshake failed", "listener", listener, "peer", peer, "err", err)
}

// Credentials wraps the server credentials of a gRPC listener: every
// handshake that creds fails is counted and logged.
func (f *Failures) Credentials(listener string, creds credentials.TransportCredentials) credentials.TransportCredentials {
	return &counted{TransportCredentials: creds, f: f, listener: listener, c: f.listen(listener)}
}

type counted struct {
	credentials.TransportCredentials
	f        *Failures
	listener string
	c        prometheus.Counter
}

func (c *counted) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		c.f.failed(c.c, c.listener, conn.RemoteAddr().String(), err)
	}
	return out, info, err
}

func (c *counted) Clone() credentials.TransportCredentials {
	return &counted{TransportCredentials: c.TransportCredentials.Clone(), f: c.f, listener: c.listener, c: c.c}
}

// httpHandshakePrefix starts the line net/http's server logs for a failed
// handshake ("http: TLS handshake error from 1.2.3.4:5: EOF").
const httpHandshakePrefix = "http: TLS handshake error from "

// ErrorLog returns an http.Server's ErrorLog for listener: a failed TLS
// handshake is counted and logged as such, any other line logged at WARN
// ("http server error"), all through the rate-limited logger.
func (f *Failures) ErrorLog(listener string) *log.Logger {
	return log.New(errorLog{f: f, listener: listener}, "", 0)
}

// errorLog counts lazily: a plain HTTP listener never fails a handshake,
// and gets no series.
type errorLog struct {
	f        *Failures
	listener string
}

func (w errorLog) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	if rest, ok := strings.CutPrefix(line, httpHandshakePrefix); ok {
		peer, reason, _ := strings.Cut(rest, ": ")
		w.f.failed(w.f.listen(w.listener), w.listener, peer, handshakeError(reason))
		return len(p), nil
	}
	w.f.log.Warn("http server error", "listener", w.listener, "err", line)
	return len(p), nil
}

// handshakeError is the reason net/http gave, as an error.
type handshakeError string

func (e handshakeError) Error() string { return string(e) }
