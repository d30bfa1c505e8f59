package ca

import (
	"context"
	"crypto/x509"
	"log/slog"
	"math"
	"net"
	"time"

	pb "istio.io/api/security/v1alpha1"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/navemesh/nave/shared/certreq"
	"github.com/navemesh/nave/shared/grpcpeer"
)

// Grant is what an authenticated caller may obtain from the CA.
type Grant struct {
	// Mesh is the mesh whose CA signs.
	Mesh string
	// Identities are the SPIFFE IDs the caller may obtain (see
	// SignOptions.Identities).
	Identities []ID
	// DNSNames and IPAddresses are the DNS and IP SANs it may obtain;
	// usually none.
	DNSNames    []string
	IPAddresses []net.IP
	// Caller names the caller in logs, for example by its own SPIFFE ID.
	Caller string
}

// Authorizer decides who is calling the CA and what it may obtain. It is
// the one seam where that is decided: the request's fields never widen a
// Grant. An error refuses the call; a *certreq.RefusalError's Reason, or else a
// gRPC status's code, says how (see Server). Implementations must be safe
// for concurrent use.
type Authorizer interface {
	Authorize(ctx context.Context) (Grant, error)
}

// AuthorizerFunc adapts a function to Authorizer.
type AuthorizerFunc func(ctx context.Context) (Grant, error)

// Authorize calls f.
func (f AuthorizerFunc) Authorize(ctx context.Context) (Grant, error) { return f(ctx) }

// PeerCertificateAuthorizer lets a workload renew its own identity: the
// caller's TLS client certificate holds exactly one URI SAN, a workload
// SPIFFE ID (spiffe://<td>/ns/<ns>/sa/<sa>); its trust domain names the
// mesh; the certificate, with the intermediates the client sent, must
// verify (client auth, now) against that mesh's roots — so a certificate
// from mesh A's CA that claims mesh B's trust domain is refused. The Grant
// is that mesh and that one identity.
//
// It verifies the chain itself and ignores the TLS layer's verified chains,
// which may have been built against another mesh's root. Serve the CA with
// tls.Config.ClientAuth set to tls.RequestClientCert or
// tls.RequireAnyClientCert, so that a bad client certificate gets a clear
// Unauthenticated status rather than a failed handshake; the handshake
// still proves that the client holds the certificate's key.
//
// Safe for concurrent use.
type PeerCertificateAuthorizer struct {
	Authority *Authority
	// Service names what the authorizer guards in its refusals ("the xDS
	// listener"); empty means "the CA".
	Service string
}

// service is what refusals say needs mutual TLS.
func (p PeerCertificateAuthorizer) service() string {
	if p.Service == "" {
		return "the CA"
	}
	return p.Service
}

// Authorize implements Authorizer.
func (p PeerCertificateAuthorizer) Authorize(ctx context.Context) (Grant, error) {
	pr, ok := peer.FromContext(ctx)
	if !ok || pr.AuthInfo == nil {
		return Grant{}, certreq.Refuse(certreq.ReasonUnauthenticated, "no transport credentials: %s needs mutual TLS with a workload certificate", p.service())
	}
	ti, ok := pr.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return Grant{}, certreq.Refuse(certreq.ReasonUnauthenticated, "connection is %s, not TLS: %s needs mutual TLS with a workload certificate", pr.AuthInfo.AuthType(), p.service())
	}
	certs := ti.State.PeerCertificates
	if len(certs) == 0 {
		return Grant{}, certreq.Refuse(certreq.ReasonUnauthenticated, "no client certificate: %s needs mutual TLS with a workload certificate", p.service())
	}
	leaf := certs[0]
	if leaf.IsCA {
		return Grant{}, certreq.Refuse(certreq.ReasonUnauthenticated, "client certificate %s is a CA certificate, not a workload's", leaf.Subject)
	}
	if len(leaf.URIs) != 1 {
		return Grant{}, certreq.Refuse(certreq.ReasonUnauthenticated, "client certificate has %d URI SANs; a workload certificate has exactly one", len(leaf.URIs))
	}
	id, err := ParseSPIFFEID(leaf.URIs[0].String())
	if err != nil {
		return Grant{}, certreq.Refuse(certreq.ReasonUnauthenticated, "client certificate: %v", err)
	}
	m, ok := p.Authority.MeshOf(id.TrustDomain)
	if !ok {
		return Grant{}, certreq.Refuse(certreq.ReasonUnauthenticated, "client certificate %s: trust domain %q is no mesh's", id, id.TrustDomain)
	}
	roots, err := p.Authority.Roots(m.Name)
	if err != nil {
		return Grant{}, err
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: inter,
		CurrentTime:   p.Authority.opts.Now(),
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return Grant{}, certreq.Refuse(certreq.ReasonUnauthenticated, "client certificate %s does not verify against mesh %q's root: %v", id, m.Name, err)
	}
	return Grant{Mesh: m.Name, Identities: []ID{id}, Caller: id.String()}, nil
}

type impersonatedKey struct{}

// Impersonated returns the identity the request being authorized asks for
// on someone's behalf (its ImpersonatedIdentity metadata), and whether it
// named one. An Authorizer that does not trust its caller to act for others
// ignores it.
func Impersonated(ctx context.Context) (string, bool) {
	v, ok := ctx.Value(impersonatedKey{}).(string)
	return v, ok
}

// ServerOptions configure a Server.
type ServerOptions struct {
	// Logger receives a line for each refusal; nil discards them.
	Logger *slog.Logger
}

// Server implements Istio's certificate service,
// istio.v1.auth.IstioCertificateService/CreateCertificate, so that Istio's
// agents and proxyless gRPC clients can obtain certificates from the hub.
// Who calls and what it may obtain comes from the Authorizer only. The
// identity a request asks to be issued on someone's behalf (Istio's
// ImpersonatedIdentity metadata, which a trusted agent such as a spoke's
// registration authority sets) reaches the Authorizer through the context
// (see Impersonated); only an Authorizer that trusts the caller to act for
// others grants it.
//
// Errors carry gRPC codes: InvalidArgument for a malformed request or CSR
// or a key not allowed, PermissionDenied for an identity the caller may not
// obtain, Unauthenticated when the Authorizer cannot tell who is calling,
// FailedPrecondition for a mesh without a CA, Internal for a failure of
// the CA itself. Every refusal is logged and counted
// (nave_hub_ca_refusals_total) with its reason.
//
// Safe for concurrent use.
type Server struct {
	pb.UnimplementedIstioCertificateServiceServer

	ca    *Authority
	authz Authorizer
	log   *slog.Logger
}

// NewServer returns a Server signing with a for callers authz admits.
func NewServer(a *Authority, authz Authorizer, opts ServerOptions) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Server{ca: a, authz: authz, log: opts.Logger}
}

// Register registers s on r.
func (s *Server) Register(r grpc.ServiceRegistrar) { pb.RegisterIstioCertificateServiceServer(r, s) }

// CreateCertificate signs the request's CSR for the caller. ValidityDuration
// is in seconds (zero: the default); the answer's CertChain holds one PEM
// certificate per entry, the leaf first, and last the mesh's whole bundle
// of roots (one entry, several certificates while a root is rotated), as
// Istio's CA answers: that is how agents learn a new root without a
// restart (decision 031).
func (s *Server) CreateCertificate(ctx context.Context, req *pb.IstioCertificateRequest) (*pb.IstioCertificateResponse, error) {
	if v, ok := req.GetMetadata().GetFields()[certreq.ImpersonatedIdentityKey]; ok {
		ctx = context.WithValue(ctx, impersonatedKey{}, v.GetStringValue())
	}
	grant, err := s.authz.Authorize(ctx)
	if err != nil {
		reason, st := authzRefusal(err)
		s.ca.metrics.refused(reason)
		s.log.Warn("certificate refused", "reason", reason, "peer", grpcpeer.Addr(ctx), "error", err)
		return nil, st.Err()
	}
	is, err := s.ca.issue(ctx, grant.Mesh, []byte(req.GetCsr()), SignOptions{
		Identities:  grant.Identities,
		DNSNames:    grant.DNSNames,
		IPAddresses: grant.IPAddresses,
		TTL:         secondsToDuration(req.GetValidityDuration()),
	})
	if err != nil {
		reason, ok := certreq.ReasonOf(err)
		if !ok {
			s.log.Error("certificate signing failed", "caller", grant.Caller, "mesh", grant.Mesh, "error", err)
			return nil, status.Error(codes.Internal, "the CA failed to sign; see the hub's log")
		}
		s.log.Warn("certificate refused", "reason", reason, "caller", grant.Caller, "mesh", grant.Mesh,
			"peer", grpcpeer.Addr(ctx), "error", err)
		return nil, status.Error(reasonCode(reason), err.Error())
	}
	chain := make([]string, len(is.chain))
	for i, c := range is.chain {
		chain[i] = string(c)
	}
	// The last entry is the root the chain ends in: the bundle holds it.
	chain[len(chain)-1] = string(is.roots)
	return &pb.IstioCertificateResponse{CertChain: chain}, nil
}

// secondsToDuration converts Istio's validity in seconds, saturating
// instead of overflowing (the Authority clamps it to its maximum anyway).
func secondsToDuration(sec int64) time.Duration {
	const maxSec = int64(math.MaxInt64 / int64(time.Second))
	switch {
	case sec > maxSec:
		return math.MaxInt64
	case sec < -maxSec:
		return math.MinInt64
	}
	return time.Duration(sec) * time.Second
}

// authzRefusal classifies an Authorizer's error: a certreq.RefusalError's reason
// and code; else a gRPC status, kept as it is; else Unauthenticated.
func authzRefusal(err error) (certreq.Reason, *status.Status) {
	if r, ok := certreq.ReasonOf(err); ok {
		return r, status.New(reasonCode(r), err.Error())
	}
	if st, ok := status.FromError(err); ok && st.Code() != codes.OK && st.Code() != codes.Unknown {
		switch st.Code() {
		case codes.PermissionDenied:
			return certreq.ReasonIdentityNotAllowed, st
		case codes.InvalidArgument:
			return certreq.ReasonInvalidRequest, st
		}
		return certreq.ReasonUnauthenticated, st
	}
	return certreq.ReasonUnauthenticated, status.New(codes.Unauthenticated, err.Error())
}

func reasonCode(r certreq.Reason) codes.Code {
	switch r {
	case certreq.ReasonInvalidRequest, certreq.ReasonInvalidCSR, certreq.ReasonKeyNotAllowed:
		return codes.InvalidArgument
	case certreq.ReasonIdentityNotAllowed:
		return codes.PermissionDenied
	case certreq.ReasonUnauthenticated:
		return codes.Unauthenticated
	case certreq.ReasonUnknownMesh:
		return codes.FailedPrecondition
	}
	return codes.Internal
}
