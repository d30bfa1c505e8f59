package enroll

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/shared/grpcpeer"
	"github.com/navemesh/nave/shared/spiffeid"
)

// AuthError is a refused spoke certificate: the gRPC code and message the
// spoke gets, and the reason label it is counted under.
type AuthError struct {
	Code   codes.Code
	Reason string // one of the nave_hub_spoke_auth_refusals_total reasons
	Msg    string
}

func (e *AuthError) Error() string { return e.Msg }

// GRPCStatus makes the error travel as its code and message.
func (e *AuthError) GRPCStatus() *status.Status { return status.New(e.Code, e.Msg) }

// AuthOptions configure a CertAuthenticator.
type AuthOptions struct {
	// Logger receives one audit line per refusal.
	Logger *slog.Logger
	// Registerer receives nave_hub_spoke_auth_refusals_total; nil
	// registers nowhere.
	Registerer prometheus.Registerer
	// Now is the clock certificates are verified at; nil is time.Now.
	Now func() time.Time
	// Hosted reports whether the hub serves a mesh now; a certificate of
	// a mesh it does not (a deleted one) is refused. Nil hosts every mesh
	// with a CA.
	Hosted func(mesh string) bool
}

// CertAuthenticator is the ingest.Authenticator of spokes that present a
// cluster certificate over mTLS. The identity is the certificate's, never
// a claim the spoke makes: the leaf's only URI SAN names a trust domain
// and a cluster (spiffeid); the trust domain names the mesh (the one mesh
// with an enrolled cluster whose Signer trust domain it is); the chain
// must verify, for client authentication and now, against that mesh's
// roots only — so a certificate of mesh A's CA that names mesh B's trust
// domain is refused — the mesh must be hosted (AuthOptions.Hosted: not
// deleted), and the cluster enrolled and not revoked.
//
// It verifies the chain itself rather than trusting the TLS layer's
// verification, so the hub's listener may use tls.RequestClientCert (the
// Enrollment service's Enroll is called without a client certificate on
// the same port) or tls.VerifyClientCertIfGiven with any pool. A
// certificate is checked when a stream or call starts: an open stream
// whose certificate expires stays open; a revoked cluster's streams are
// closed by the Enforcer.
//
// Every refusal is counted (nave_hub_spoke_auth_refusals_total{reason})
// and logged as an audit line, and returned as an *AuthError whose
// message tells the spoke why. A CertAuthenticator is safe for concurrent
// use.
type CertAuthenticator struct {
	signer   Signer
	reg      Registry
	log      *slog.Logger
	refusals *prometheus.CounterVec
	now      func() time.Time
	hosted   func(mesh string) bool
}

var _ ingest.Authenticator = (*CertAuthenticator)(nil)

// NewCertAuthenticator returns an authenticator that trusts signer's
// per-mesh roots and reg's enrollments and revocations.
func NewCertAuthenticator(signer Signer, reg Registry, opts AuthOptions) *CertAuthenticator {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Hosted == nil {
		opts.Hosted = func(string) bool { return true }
	}
	return &CertAuthenticator{signer: signer, reg: reg, log: opts.Logger, refusals: newAuthMetrics(opts.Registerer), now: opts.Now,
		hosted: opts.Hosted}
}

// Authenticate implements ingest.Authenticator.
func (a *CertAuthenticator) Authenticate(ctx context.Context) (ingest.ClusterIdentity, error) {
	rec, err := a.AuthenticateCluster(ctx)
	return rec.Identity(), err
}

// AuthenticateCluster authenticates like Authenticate and returns the
// enrolled cluster's record, read once, for callers that need more than its
// identity (the namespaces its join token scoped it to). On error the
// record is zero.
func (a *CertAuthenticator) AuthenticateCluster(ctx context.Context) (ClusterRecord, error) {
	p, _ := peer.FromContext(ctx)
	rec, id, td, err := a.authenticate(ctx, p)
	if err != nil {
		var ae *AuthError
		if !errors.As(err, &ae) {
			ae = &AuthError{Code: codes.Internal, Reason: authInternal, Msg: err.Error()}
		}
		a.refusals.WithLabelValues(ae.Reason).Inc()
		a.log.Warn("spoke authentication refused", "mesh", id.Mesh, "cluster", id.Cluster, "trustDomain", td,
			"peer", grpcpeer.Addr(ctx), "reason", ae.Reason, "err", ae.Msg)
		return ClusterRecord{}, ae
	}
	return rec, nil
}

// authenticate returns the cluster's record, and as much of its identity
// as it learnt before refusing (for the audit line).
func (a *CertAuthenticator) authenticate(ctx context.Context, p *peer.Peer) (rec ClusterRecord, id ingest.ClusterIdentity, td string, err error) {
	refuse := func(code codes.Code, reason, format string, args ...any) error {
		return &AuthError{Code: code, Reason: reason, Msg: fmt.Sprintf(format, args...)}
	}
	if p == nil {
		return rec, id, "", refuse(codes.Unauthenticated, authNoCertificate, "no peer information")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return rec, id, "", refuse(codes.Unauthenticated, authNoCertificate, "connection is not TLS; a spoke presents its cluster certificate over mTLS")
	}
	certs := info.State.PeerCertificates
	if len(certs) == 0 {
		return rec, id, "", refuse(codes.Unauthenticated, authNoCertificate, "no client certificate; a spoke presents its cluster certificate over mTLS")
	}
	td, cluster, err := spiffeid.FromCertificate(certs[0])
	if err != nil {
		return rec, id, "", refuse(codes.Unauthenticated, authBadIdentity, "client certificate: %v", err)
	}
	id.Cluster = cluster
	mesh, err := a.meshOf(ctx, td)
	if err != nil {
		return rec, id, td, err
	}
	id.Mesh = mesh
	if !a.hosted(mesh) {
		return rec, id, td, refuse(codes.PermissionDenied, authNotHosted, "mesh %s is not a mesh of this hub (deleted?)", mesh)
	}
	roots, err := a.signer.Roots(mesh)
	if err != nil {
		return rec, id, td, refuse(codes.Unavailable, authInternal, "roots of mesh %s: %v", mesh, err)
	}
	if _, err := verifyClient(certs, roots, a.now()); err != nil {
		return rec, id, td, refuse(codes.Unauthenticated, authUntrusted, "client certificate for %s is not trusted by mesh %s: %v", id, mesh, err)
	}
	revoked, err := a.reg.Revoked(ctx, mesh, cluster)
	if err != nil {
		return rec, id, td, refuse(codes.Unavailable, authInternal, "revocation of %s: %v", id, err)
	}
	if revoked {
		return rec, id, td, refuse(codes.PermissionDenied, authRevoked, "cluster %s is revoked", id)
	}
	if rec, err = a.reg.Cluster(ctx, mesh, cluster); err != nil {
		if errors.Is(err, ErrNotEnrolled) {
			return ClusterRecord{}, id, td, refuse(codes.PermissionDenied, authNotEnrolled, "cluster %s is not enrolled", id)
		}
		return ClusterRecord{}, id, td, refuse(codes.Unavailable, authInternal, "enrollment of %s: %v", id, err)
	}
	return rec, id, td, nil
}

// meshOf maps a trust domain to the one mesh with enrolled clusters whose
// CA has it.
func (a *CertAuthenticator) meshOf(ctx context.Context, td string) (string, error) {
	meshes, err := a.reg.Meshes(ctx)
	if err != nil {
		return "", &AuthError{Code: codes.Unavailable, Reason: authInternal, Msg: fmt.Sprintf("meshes: %v", err)}
	}
	var found []string
	for _, m := range meshes {
		got, err := a.signer.TrustDomain(m)
		if err == nil && got == td {
			found = append(found, m)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return "", &AuthError{Code: codes.Unauthenticated, Reason: authUnknownTrustDomain,
			Msg: fmt.Sprintf("trust domain %q is not the trust domain of a mesh with enrolled clusters", td)}
	default:
		return "", &AuthError{Code: codes.Unauthenticated, Reason: authUnknownTrustDomain,
			Msg: fmt.Sprintf("trust domain %q is claimed by several meshes (%v)", td, found)}
	}
}
