package admission

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/navemesh/nave/shared/handshake"
	"github.com/navemesh/nave/shared/tlsconfig"
)

// DefaultMaxRequestBytes bounds a review's body unless Options say
// otherwise: an UPDATE carries the object and its previous version, each
// up to the 1.5 MiB etcd stores, and the request around them.
const DefaultMaxRequestBytes = 8 << 20

// MinMaxRequestBytes is the smallest body limit a Server accepts.
const MinMaxRequestBytes = 64 << 10

// Timeouts of a connection and of one review. The API server waits at
// most 30 s for a webhook.
const (
	readHeaderTimeout = 10 * time.Second
	reviewTimeout     = 30 * time.Second
	idleTimeout       = 90 * time.Second
	shutdownTimeout   = 5 * time.Second
	maxHeaderBytes    = 64 << 10
)

// Reviewer answers one admission request. It returns the response without
// its UID (the Server sets it); it must not keep req. Implementations must
// be safe for concurrent use: the Server calls Review from one goroutine
// per request.
type Reviewer interface {
	Review(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse
}

// ReviewerFunc adapts a function to a Reviewer.
type ReviewerFunc func(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse

// Review calls f.
func (f ReviewerFunc) Review(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	return f(ctx, req)
}

// Options configure a Server.
type Options struct {
	// MaxRequestBytes bounds a request body; 0 is DefaultMaxRequestBytes.
	MaxRequestBytes int64
	// Logger receives bad requests (debug) and reviewer panics (error);
	// nil discards them.
	Logger *slog.Logger
	// Registerer receives the nave_spoke_webhook_* review metrics; nil
	// registers nowhere.
	Registerer prometheus.Registerer
	// Handshakes counts and logs (rate-limited) the failed TLS handshakes
	// (listener "webhook.listen") and the HTTP server's other errors; nil
	// logs them at debug, uncounted.
	Handshakes *handshake.Failures
}

// Server serves admission reviews, one Reviewer per path, over HTTPS. Add
// every path with Handle before Serve; after that a Server is safe for
// concurrent use (it is an http.Handler too, for tests).
type Server struct {
	max        int64
	log        *slog.Logger
	handshakes *handshake.Failures
	metrics    *metrics
	mux        *http.ServeMux

	mu    sync.Mutex
	paths map[string]bool
}

// NewServer returns a Server with no paths.
func NewServer(opts Options) *Server {
	s := &Server{max: opts.MaxRequestBytes, log: opts.Logger, handshakes: opts.Handshakes, mux: http.NewServeMux(), paths: map[string]bool{}}
	if s.max == 0 {
		s.max = DefaultMaxRequestBytes
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.metrics = newMetrics(opts.Registerer)
	return s
}

// Handle serves the webhook called name (its metrics label) at path, e.g.
// "/validate". It panics if path is already handled.
func (s *Server) Handle(path, name string, r Reviewer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paths[path] {
		panic("admission: path " + path + " handled twice")
	}
	s.paths[path] = true
	s.metrics.init(name)
	s.mux.Handle(path, s.reviewHandler(name, r))
}

// ServeHTTP answers one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Serve serves HTTPS on lis until ctx ends, with the certificate
// getCertificate returns for each handshake, then shuts down (waiting up
// to 5 s for reviews under way). It returns nil when stopped by ctx.
func (s *Server) Serve(ctx context.Context, lis net.Listener, getCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)) error {
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		TLSConfig:         tlsconfig.Server(tlsconfig.Ours, func() (*tls.Certificate, error) { return getCertificate(nil) }),
		// TLS handshake failures (scanners, a client that does not trust
		// the certificate yet) are not the server's errors.
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	if s.handshakes != nil {
		srv.ErrorLog = s.handshakes.ErrorLog("webhook.listen")
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(lis, "", "") }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			srv.Close()
		}
		<-errc
		return nil
	case err := <-errc:
		return fmt.Errorf("webhook server: %w", err)
	}
}

// reviewHandler checks, decodes and answers one review.
func (s *Server) reviewHandler(name string, rv Reviewer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(start.Add(reviewTimeout))
		_ = rc.SetWriteDeadline(start.Add(reviewTimeout))
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			s.refuse(w, r, http.StatusMethodNotAllowed, "method", fmt.Sprintf("method %s: an AdmissionReview is POSTed", clip(r.Method)))
			return
		}
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			s.refuse(w, r, http.StatusUnsupportedMediaType, "content_type",
				fmt.Sprintf("content type %q: want application/json", clip(r.Header.Get("Content-Type"))))
			return
		}
		if r.ContentLength > s.max {
			s.refuse(w, r, http.StatusRequestEntityTooLarge, "too_large",
				fmt.Sprintf("the body is %d bytes, more than the %d accepted (webhook.maxRequestBytes)", r.ContentLength, s.max))
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.max))
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			s.refuse(w, r, http.StatusRequestEntityTooLarge, "too_large",
				fmt.Sprintf("the body is more than the %d bytes accepted (webhook.maxRequestBytes)", s.max))
			return
		case err != nil:
			s.refuse(w, r, http.StatusBadRequest, "read", "reading the body: "+clip(err.Error()))
			return
		}
		review, err := DecodeReview(body)
		if err != nil {
			s.refuse(w, r, http.StatusBadRequest, "malformed", err.Error())
			return
		}
		req := review.Request
		resp, err := s.review(r.Context(), rv, req)
		if err != nil {
			s.log.Error("webhook review failed", "webhook", name, "uid", req.UID, "kind", req.Kind.Kind,
				"namespace", req.Namespace, "name", req.Name, "err", err)
			s.metrics.reviews.WithLabelValues(name, resultError).Inc()
			http.Error(w, "internal error reviewing the request; see the spoke's log", http.StatusInternalServerError)
			return
		}
		resp.UID = req.UID
		out, err := EncodeReview(resp)
		if err != nil {
			s.log.Error("webhook response not encodable", "webhook", name, "uid", req.UID, "err", err)
			s.metrics.reviews.WithLabelValues(name, resultError).Inc()
			http.Error(w, "internal error encoding the response", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
		result := resultAllowed
		if !resp.Allowed {
			result = resultDenied
		}
		s.metrics.reviews.WithLabelValues(name, result).Inc()
		s.metrics.warnings.WithLabelValues(name).Add(float64(len(resp.Warnings)))
		s.metrics.duration.WithLabelValues(name).Observe(time.Since(start).Seconds())
	})
}

// review calls rv, turning a panic or a missing response into an error.
func (s *Server) review(ctx context.Context, rv Reviewer, req *admissionv1.AdmissionRequest) (resp *admissionv1.AdmissionResponse, err error) {
	defer func() {
		if p := recover(); p != nil {
			resp, err = nil, fmt.Errorf("reviewer panicked: %v", p)
		}
	}()
	resp = rv.Review(ctx, req)
	if resp == nil {
		return nil, errors.New("reviewer returned no response")
	}
	return resp, nil
}

// refuse answers a request that is not a review the server can answer.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, code int, reason, msg string) {
	s.metrics.badRequests.WithLabelValues(reason).Inc()
	s.log.Debug("webhook request refused", "path", r.URL.Path, "remote", r.RemoteAddr, "status", code, "reason", msg)
	http.Error(w, msg, code)
}

// Deny is the response refusing a request for reason, naming field when
// it is known: the API server reports it as "admission webhook ... denied
// the request: <message>".
func Deny(message, field, reason string) *admissionv1.AdmissionResponse {
	st := &metav1.Status{Status: metav1.StatusFailure, Message: message, Reason: metav1.StatusReasonInvalid,
		Code: http.StatusUnprocessableEntity}
	if field != "" {
		st.Details = &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: metav1.CauseTypeFieldValueInvalid, Field: field, Message: reason}}}
	}
	return &admissionv1.AdmissionResponse{Allowed: false, Result: st}
}

// Allow is the response admitting a request, with warnings for the client.
func Allow(warnings ...string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: true, Warnings: warnings}
}
