package enroll

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/navemesh/nave/hub/ingest"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/certreq"
	"github.com/navemesh/nave/shared/grpcpeer"
)

// DefaultCertTTL is how long a cluster certificate is valid unless
// ServerOptions say otherwise; spokes renew at about 80 % of it.
const DefaultCertTTL = 24 * time.Hour

// ServerOptions configure a Server.
type ServerOptions struct {
	// CertTTL is the lifetime of issued cluster certificates; 0 is
	// DefaultCertTTL.
	CertTTL time.Duration
	// Logger receives the audit lines: one per enrollment, renewal and
	// refusal, with mesh, cluster, peer and reason, never a token secret.
	Logger *slog.Logger
	// Registerer receives the nave_hub_enroll_* metrics; nil registers
	// nowhere.
	Registerer prometheus.Registerer
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Hosted reports whether the hub serves a mesh now: a token of a
	// mesh it does not (a deleted one) is refused, and spent. Renewals
	// are refused by the authenticator (AuthOptions.Hosted). Nil hosts
	// every mesh.
	Hosted func(mesh string) bool
}

// Server implements the Enrollment service. Enroll needs no client
// certificate; Renew is authenticated by auth (a CertAuthenticator). It is
// safe for concurrent use.
type Server struct {
	protocolv1.UnimplementedEnrollmentServer

	store   Store
	signer  Signer
	auth    ingest.Authenticator
	ttl     time.Duration
	log     *slog.Logger
	metrics *serverMetrics
	now     func() time.Time
	hosted  func(mesh string) bool
}

// NewServer returns the Enrollment service over store, issuing through
// signer and authenticating renewals with auth.
func NewServer(store Store, signer Signer, auth ingest.Authenticator, opts ServerOptions) *Server {
	if opts.CertTTL <= 0 {
		opts.CertTTL = DefaultCertTTL
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Hosted == nil {
		opts.Hosted = func(string) bool { return true }
	}
	return &Server{store: store, signer: signer, auth: auth, ttl: opts.CertTTL, log: opts.Logger,
		metrics: newServerMetrics(opts.Registerer), now: opts.Now, hosted: opts.Hosted}
}

// refusal is a refused call: what the spoke is told and what is counted.
type refusal struct {
	code   codes.Code
	reason string
	err    error
	// hint is added to what the spoke is told of an internal error (whose
	// details stay in the log).
	hint string
}

// refuse counts and logs r and returns its status. attrs name what is
// known of the caller.
func (s *Server) refuse(ctx context.Context, msg string, r refusal, attrs ...any) error {
	s.metrics.refusals.WithLabelValues(r.reason).Inc()
	s.log.Warn(msg, append(attrs, "peer", grpcpeer.Addr(ctx), "reason", r.reason, "err", r.err)...)
	if r.code == codes.Internal {
		// The details stay in the log.
		return status.Error(codes.Internal, "the hub could not issue a certificate; see its log"+r.hint)
	}
	return status.Error(r.code, r.err.Error())
}

// Enroll implements protocolv1.EnrollmentServer.
func (s *Server) Enroll(ctx context.Context, req *protocolv1.EnrollRequest) (*protocolv1.EnrollResponse, error) {
	const refused = "enrollment refused"
	tok, err := ParseToken(req.GetToken())
	if err != nil {
		return nil, s.refuse(ctx, refused, refusal{code: codes.Unauthenticated, reason: reasonMalformedToken, err: err})
	}
	// The request is checked before the token is spent on it.
	csr, err := parseCSR(req.GetCsrPem())
	if err != nil {
		return nil, s.refuse(ctx, refused, refusal{code: codes.InvalidArgument, reason: reasonBadCSR, err: err}, "token", tok.ID)
	}
	if c, ok := s.signer.(ServerNameChecker); ok {
		if err := c.CheckClusterServerNames(csr.DNSNames, csr.IPAddresses); err != nil {
			return nil, s.refuse(ctx, refused, issueRefusal(fmt.Errorf("sign certificate: %w", err), "; the join token is not used"), "token", tok.ID)
		}
	}
	info, err := s.store.Redeem(ctx, req.GetToken())
	if err != nil {
		return nil, s.refuse(ctx, refused, redeemRefusal(err), "token", tok.ID)
	}
	id := info.Identity()
	attrs := []any{"mesh", id.Mesh, "cluster", id.Cluster, "token", tok.ID}
	// From here on the token is spent.
	spent := fmt.Sprintf("; join token %s is used up: create a new one", tok.ID)
	if !s.hosted(id.Mesh) {
		return nil, s.refuse(ctx, refused, refusal{code: codes.PermissionDenied, reason: reasonNotHosted,
			err: fmt.Errorf("mesh %s is not a mesh of this hub (deleted?)%s", id.Mesh, spent)}, attrs...)
	}
	if revoked, err := s.store.Revoked(ctx, id.Mesh, id.Cluster); err != nil || revoked {
		r := refusal{code: codes.PermissionDenied, reason: reasonRevoked, err: fmt.Errorf("cluster %s is revoked", id)}
		if err != nil {
			r = refusal{code: codes.Internal, reason: reasonInternal, err: err, hint: spent}
		}
		return nil, s.refuse(ctx, refused, r, attrs...)
	}
	chain, bundle, leaf, td, err := s.issue(ctx, id, req.GetCsrPem(), csr)
	if err != nil {
		return nil, s.refuse(ctx, refused, issueRefusal(err, spent), attrs...)
	}
	now := s.now().UTC()
	rec := ClusterRecord{Mesh: id.Mesh, Cluster: id.Cluster, TrustDomain: td, Serial: leaf.SerialNumber.Text(16),
		NotAfter: leaf.NotAfter.UTC(), EnrolledAt: now, TokenID: tok.ID, Namespaces: info.Namespaces}
	if err := s.store.RecordCluster(ctx, rec); err != nil {
		return nil, s.refuse(ctx, refused, refusal{code: codes.Internal, reason: reasonInternal, err: err, hint: spent}, attrs...)
	}
	s.metrics.enrollments.Inc()
	s.log.Info("spoke enrolled", append(attrs, "peer", grpcpeer.Addr(ctx), "serial", rec.Serial, "notAfter", rec.NotAfter)...)
	return &protocolv1.EnrollResponse{CertChainPem: chain, TrustBundlePem: bundle, Mesh: id.Mesh, Cluster: id.Cluster}, nil
}

// issueRefusal is what the spoke is told when its certificate was not
// issued: the CA's refusal of what the request asks for (a fallback
// server name it may not have) as InvalidArgument, anything else as an
// internal error with hint.
func issueRefusal(err error, hint string) refusal {
	if _, ok := certreq.ReasonOf(err); ok {
		return refusal{code: codes.InvalidArgument, reason: reasonBadCSR, err: fmt.Errorf("%w%s", err, hint)}
	}
	return refusal{code: codes.Internal, reason: reasonInternal, err: err, hint: hint}
}

// redeemRefusal maps a Tokens.Redeem error to what the spoke is told.
func redeemRefusal(err error) refusal {
	for _, m := range []struct {
		err    error
		reason string
	}{
		{ErrTokenMalformed, reasonMalformedToken},
		{ErrTokenUnknown, reasonUnknownToken},
		{ErrTokenInvalid, reasonInvalidToken},
		{ErrTokenUsed, reasonUsedToken},
		{ErrTokenExpired, reasonExpiredToken},
	} {
		if errors.Is(err, m.err) {
			return refusal{code: codes.Unauthenticated, reason: m.reason, err: err}
		}
	}
	return refusal{code: codes.Internal, reason: reasonInternal, err: err}
}

// Renew implements protocolv1.EnrollmentServer.
func (s *Server) Renew(ctx context.Context, req *protocolv1.RenewRequest) (*protocolv1.RenewResponse, error) {
	const refused = "renewal refused"
	id, err := s.auth.Authenticate(ctx)
	if err != nil {
		// The authenticator has logged the audit line; this counts the
		// refused renewal.
		reason := reasonUnauthenticated
		if ae := (*AuthError)(nil); errors.As(err, &ae) && ae.Reason == authRevoked {
			reason = reasonRevoked
		}
		s.metrics.refusals.WithLabelValues(reason).Inc()
		return nil, err
	}
	attrs := []any{"mesh", id.Mesh, "cluster", id.Cluster}
	csr, err := parseCSR(req.GetCsrPem())
	if err != nil {
		return nil, s.refuse(ctx, refused, refusal{code: codes.InvalidArgument, reason: reasonBadCSR, err: err}, attrs...)
	}
	prev, err := s.store.Cluster(ctx, id.Mesh, id.Cluster)
	if err != nil {
		return nil, s.refuse(ctx, refused, refusal{code: codes.Internal, reason: reasonInternal, err: err}, attrs...)
	}
	chain, bundle, leaf, td, err := s.issue(ctx, id, req.GetCsrPem(), csr)
	if err != nil {
		return nil, s.refuse(ctx, refused, issueRefusal(err, ""), attrs...)
	}
	// A revocation that landed while the certificate was being signed
	// wins: the certificate is not handed out.
	if revoked, err := s.store.Revoked(ctx, id.Mesh, id.Cluster); err != nil || revoked {
		r := refusal{code: codes.PermissionDenied, reason: reasonRevoked, err: fmt.Errorf("cluster %s is revoked", id)}
		if err != nil {
			r = refusal{code: codes.Internal, reason: reasonInternal, err: err}
		}
		return nil, s.refuse(ctx, refused, r, attrs...)
	}
	rec := prev
	rec.TrustDomain, rec.Serial, rec.NotAfter, rec.RenewedAt = td, leaf.SerialNumber.Text(16), leaf.NotAfter.UTC(), s.now().UTC()
	if err := s.store.RecordCluster(ctx, rec); err != nil {
		return nil, s.refuse(ctx, refused, refusal{code: codes.Internal, reason: reasonInternal, err: err}, attrs...)
	}
	s.metrics.renewals.Inc()
	s.log.Info("spoke certificate renewed", append(attrs, "peer", grpcpeer.Addr(ctx), "serial", rec.Serial, "notAfter", rec.NotAfter)...)
	return &protocolv1.RenewResponse{CertChainPem: chain, TrustBundlePem: bundle}, nil
}

// issue has the signer sign csrPEM for id and checks the result.
func (s *Server) issue(ctx context.Context, id ingest.ClusterIdentity, csrPEM []byte, csr *x509.CertificateRequest) (chain, bundle []byte, leaf *x509.Certificate, td string, err error) {
	td, err = s.signer.TrustDomain(id.Mesh)
	if err != nil {
		return nil, nil, nil, "", fmt.Errorf("trust domain of mesh %s: %w", id.Mesh, err)
	}
	roots, err := s.signer.Roots(id.Mesh)
	if err != nil {
		return nil, nil, nil, "", fmt.Errorf("roots of mesh %s: %w", id.Mesh, err)
	}
	chain, err = s.signer.SignCluster(ctx, id.Mesh, id.Cluster, csrPEM, s.ttl)
	if err != nil {
		return nil, nil, nil, "", fmt.Errorf("sign certificate for %s: %w", id, err)
	}
	leaf, err = checkIssued(chain, csr, roots, td, id.Cluster, s.now())
	if err != nil {
		return nil, nil, nil, "", fmt.Errorf("the CA issued an unusable certificate for %s: %w", id, err)
	}
	if b, ok := s.signer.(TrustBundler); ok {
		if bundle, err = b.TrustBundlePEM(id.Mesh); err != nil {
			return nil, nil, nil, "", fmt.Errorf("trust bundle of mesh %s: %w", id.Mesh, err)
		}
	}
	return chain, bundle, leaf, td, nil
}
