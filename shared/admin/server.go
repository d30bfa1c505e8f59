// Package admin serves the admin HTTP endpoints both nave binaries expose: health probes,
// Prometheus metrics, JSON debug views and Go's pprof profiles.
package admin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/navemesh/nave/shared/handshake"
)

// shutdownTimeout bounds how long Serve waits for in-flight requests once its context ends.
const shutdownTimeout = 5 * time.Second

// debugName is what a debug view may be called: one lowercase path segment.
var debugName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`)

// pagePath is where a page may be served: a subtree of lowercase segments.
var pagePath = regexp.MustCompile(`^(/[a-z0-9][a-z0-9_.-]*)+/$`)

// Server serves, on the listeners given to Serve:
//
//	/healthz/live    200 while the process serves HTTP
//	/healthz/ready   200 when every ready check passes, else 503 with the failing checks as JSON
//	/metrics         the registry in the Prometheus exposition format
//	/debug/          a JSON index of the debug views
//	/debug/<name>    one debug view as indented JSON
//	/debug/pprof/    Go's runtime profiles
//	/<page>/         pages added with HandlePage (the hub's /status/)
//
// A Server is safe for concurrent use: debug views and ready checks may be added before or
// while it serves, from any goroutine, and Serve may run on several listeners at once.
type Server struct {
	logger     *slog.Logger
	handshakes *handshake.Failures
	handler    http.Handler
	mux        *http.ServeMux

	mu     sync.RWMutex
	debug  map[string]debugView
	checks map[string]func() error
}

type debugView struct {
	description string
	fn          func(r *http.Request) (any, error)
	// tenant: the view filters by the caller's scope (HandleTenantDebug).
	tenant bool
}

// New returns a server exposing reg on /metrics and logging to logger. It
// registers on reg the count of failed TLS handshakes (Handshakes).
func New(logger *slog.Logger, reg *prometheus.Registry) *Server {
	var r prometheus.Registerer
	if reg != nil {
		r = reg
	}
	s := &Server{
		logger:     logger,
		handshakes: handshake.New(logger, r),
		debug:      map[string]debugView{},
		checks:     map[string]func() error{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz/live", s.serveLive)
	mux.HandleFunc("GET /healthz/ready", s.serveReady)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      promErrorLog{logger},
		ErrorHandling: promhttp.ContinueOnError,
	}))
	mux.HandleFunc("GET /debug/{$}", s.serveDebugIndex)
	mux.HandleFunc("GET /debug/{name}", s.serveDebug)
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("POST /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	s.handler = mux
	s.mux = mux
	return s
}

// HandlePage serves h under path, a subtree such as "/status/" outside /debug/, /healthz/ and
// /metrics: a page for people (the hub's status page). On an operator listener it is served to
// every authenticated operator whatever their scope, so a page must hold no data itself: what
// it shows it fetches from the debug views, which are scoped. Probe handlers do not serve it.
// A path that is not such a subtree, or is registered twice, panics, as http.ServeMux does.
func (s *Server) HandlePage(path string, h http.Handler) {
	if !pagePath.MatchString(path) || strings.HasPrefix(path, "/debug/") || strings.HasPrefix(path, "/healthz/") {
		panic(fmt.Sprintf("admin: invalid page path %q", path))
	}
	s.mux.Handle("GET "+path, h)
}

// HandleAPI serves h for pattern, an http.ServeMux pattern with a method
// under /api/ ("POST /api/v1/meshes"): an API for tools (navectl). On an
// operator listener it is served to every authenticated operator, with
// the operator's Scope in the request's context (ScopeOf), so h decides
// what each scope may see and change; on a plain admin listener (Serve)
// to everyone, as the debug views are. Probe handlers do not serve it. A
// pattern not under /api/ panics.
func (s *Server) HandleAPI(pattern string, h http.Handler) {
	_, path, _ := strings.Cut(pattern, " ")
	if !strings.HasPrefix(path, "/api/") {
		panic(fmt.Sprintf("admin: invalid API pattern %q", pattern))
	}
	s.mux.Handle(pattern, h)
}

// NewRegistry returns a fresh registry holding the Go runtime and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// Handshakes counts and logs the failed TLS handshakes of the process's
// listeners, its own and the gRPC ones (handshake.Failures.Credentials).
func (s *Server) Handshakes() *handshake.Failures { return s.handshakes }

// Handler returns the HTTP handler of every endpoint, for tests or to mount elsewhere.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve serves on lis until ctx ends, then shuts down gracefully: it stops accepting, waits up
// to 5 seconds for in-flight requests, closes whatever is left and returns nil. It returns an
// error if serving fails before ctx ends. Serve closes lis.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	if a, ok := lis.Addr().(*net.TCPAddr); ok && !a.IP.IsLoopback() {
		s.logger.Warn("the admin server listens beyond loopback: it serves plain HTTP, and its debug views show every mesh; expose it to the operator only",
			"address", lis.Addr().String())
	}
	return s.ServeHandler(ctx, lis, s.handler, nil)
}

// ServeHandler is Serve with another handler (OperatorHandler, ProbeHandler) and, if tlsConfig
// is not nil, over TLS: that is the operator listener, whose failed handshakes are counted with
// listener="admin.operatorListen". The HTTP server's errors go to the logger, rate-limited
// (Handshakes).
func (s *Server) ServeHandler(ctx context.Context, lis net.Listener, handler http.Handler, tlsConfig *tls.Config) error {
	name := "admin.listen"
	if tlsConfig != nil {
		name = "admin.operatorListen"
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          s.handshakes.ErrorLog(name),
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	if tlsConfig != nil {
		lis = tls.NewListener(lis, tlsConfig)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	s.logger.Info("admin server listening", "address", lis.Addr().String(), "tls", tlsConfig != nil)

	select {
	case err := <-done:
		return fmt.Errorf("admin server on %s: %w", lis.Addr(), err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		s.logger.Warn("admin server shutdown timed out, closing connections", "error", err)
		_ = srv.Close() // Close only reports the listener's close error, which Shutdown already met.
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("admin server on %s: %w", lis.Addr(), err)
	}
	return nil
}

// promErrorLog routes promhttp's gathering errors to the server's logger.
type promErrorLog struct{ logger *slog.Logger }

func (l promErrorLog) Println(v ...any) {
	l.logger.Warn("metrics gathering failed", "error", fmt.Sprint(v...))
}
