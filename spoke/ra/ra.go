package ra

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	pb "istio.io/api/security/v1alpha1"

	"github.com/navemesh/nave/shared/certreq"
	"github.com/navemesh/nave/shared/grpcpeer"
	"github.com/navemesh/nave/shared/grpcserve"
	"github.com/navemesh/nave/shared/handshake"
	"github.com/navemesh/nave/shared/spiffeid"
	"github.com/navemesh/nave/shared/tlsconfig"
)

// DefaultAudience is the audience a workload's token must be valid for
// unless Options.Audiences says otherwise: Istio's default ("istio-ca").
const DefaultAudience = "istio-ca"

// Defaults of Options.
const (
	DefaultReviewTimeout = 10 * time.Second
	DefaultHubTimeout    = 30 * time.Second
)

// maxRequestBytes bounds a request message: a CSR (at most certreq.MaxSize)
// and a little metadata.
const maxRequestBytes = certreq.MaxSize + 16<<10

// Options configure a Server.
type Options struct {
	// Reviewer checks workloads' tokens with the cluster's API server
	// (KubeReviewer). Required.
	Reviewer TokenReviewer
	// TrustDomain is the mesh's trust domain (the spoke's cluster
	// certificate's). Required.
	TrustDomain string
	// Audiences a token must be valid for one of; nil is
	// []string{DefaultAudience}.
	Audiences []string
	// Hub is Istio's CA API on the hub's spokes listener, over the spoke's
	// mTLS connection (a ClientConn made with the spoke's Renewer.ClientTLS).
	// Required.
	Hub pb.IstioCertificateServiceClient
	// ReviewTimeout and HubTimeout bound a TokenReview and a call to the
	// hub; 0 is DefaultReviewTimeout and DefaultHubTimeout.
	ReviewTimeout, HubTimeout time.Duration
	// Logger receives the audit lines; nil discards them.
	Logger *slog.Logger
	// Registerer receives nave_spoke_ra_certificates_total and
	// nave_spoke_ra_refusals_total; nil registers nowhere.
	Registerer prometheus.Registerer
	// Handshakes counts and logs the listener's failed TLS handshakes
	// (listener "ra.listen"); nil: neither.
	Handshakes *handshake.Failures
	// Now is the clock of Status; nil is time.Now.
	Now func() time.Time
	// Services are more gRPC services served on the RA's listener, to
	// workloads that authenticate as they do to the RA (Authenticate): the
	// gateways' credentials (spoke/gatewaycert).
	Services []func(grpc.ServiceRegistrar)
}

// Server is the spoke's registration authority: Istio's
// IstioCertificateService for the cluster's workloads (see the package
// documentation). Safe for concurrent use.
type Server struct {
	pb.UnimplementedIstioCertificateServiceServer

	opts    Options
	log     *slog.Logger
	metrics *metrics

	mu       sync.Mutex
	issued   uint64
	refusals map[Reason]uint64
	last     *Refusal
}

// New returns a Server, or an error naming a missing or invalid option.
func New(opts Options) (*Server, error) {
	if opts.Reviewer == nil {
		return nil, errors.New("ra: a TokenReviewer is required")
	}
	if opts.Hub == nil {
		return nil, errors.New("ra: a hub CA client is required")
	}
	if err := spiffeid.ValidateTrustDomain(opts.TrustDomain); err != nil {
		return nil, fmt.Errorf("ra: trust domain: %w", err)
	}
	if opts.Audiences == nil {
		opts.Audiences = []string{DefaultAudience}
	}
	if len(opts.Audiences) == 0 || slices.Contains(opts.Audiences, "") {
		return nil, errors.New("ra: audiences must be non-empty strings")
	}
	opts.Audiences = slices.Clone(opts.Audiences)
	if opts.ReviewTimeout <= 0 {
		opts.ReviewTimeout = DefaultReviewTimeout
	}
	if opts.HubTimeout <= 0 {
		opts.HubTimeout = DefaultHubTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Server{opts: opts, log: opts.Logger, metrics: newMetrics(opts.Registerer),
		refusals: make(map[Reason]uint64, len(Reasons))}, nil
}

// Register registers s on r.
func (s *Server) Register(r grpc.ServiceRegistrar) { pb.RegisterIstioCertificateServiceServer(r, s) }

// Serve serves s on lis with TLS, presenting the certificate getCert
// returns (the spoke's cluster certificate, so renewals apply to new
// connections), and without asking for client certificates: workloads
// authenticate with their token. It returns when ctx is done (after
// in-flight calls finish, at most 5 s) or when serving fails; lis is closed
// either way.
func (s *Server) Serve(ctx context.Context, lis net.Listener, getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) error {
	if getCert == nil {
		lis.Close()
		return errors.New("ra: a serving certificate is required")
	}
	// Istio agents and gRPC applications call the RA: foreign clients.
	creds := credentials.NewTLS(tlsconfig.Server(tlsconfig.Foreign, func() (*tls.Certificate, error) { return getCert(nil) }))
	if s.opts.Handshakes != nil {
		creds = s.opts.Handshakes.Credentials("ra.listen", creds)
	}
	gs := grpc.NewServer(
		grpc.Creds(creds),
		grpc.MaxRecvMsgSize(maxRequestBytes),
	)
	s.Register(gs)
	for _, register := range s.opts.Services {
		register(gs)
	}
	if err := grpcserve.Serve(ctx, gs, lis, 5*time.Second); err != nil {
		return fmt.Errorf("ra: serve: %w", err)
	}
	return nil
}

// CreateCertificate checks the caller's token and CSR and forwards the CSR
// to the hub for the caller's workload identity.
func (s *Server) CreateCertificate(ctx context.Context, req *pb.IstioCertificateRequest) (*pb.IstioCertificateResponse, error) {
	id, r, err := s.authenticate(ctx)
	if err != nil {
		return nil, s.refuse(ctx, r, "", err)
	}
	if r, err := checkCSR(req.GetCsr(), id); err != nil {
		return nil, s.refuse(ctx, r, id.String(), err)
	}

	fwd := &pb.IstioCertificateRequest{
		Csr:              req.GetCsr(),
		ValidityDuration: req.GetValidityDuration(),
		Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			certreq.ImpersonatedIdentityKey: structpb.NewStringValue(id.String()),
		}},
	}
	hctx, cancel := context.WithTimeout(ctx, s.opts.HubTimeout)
	defer cancel()
	resp, err := s.opts.Hub.CreateCertificate(hctx, fwd)
	if err != nil {
		st := status.Convert(err)
		return nil, s.refuseStatus(ctx, ReasonHubError, id.String(), status.New(st.Code(), "hub: "+st.Message()))
	}
	s.mu.Lock()
	s.issued++
	s.mu.Unlock()
	s.metrics.issued.Inc()
	s.log.Info("workload certificate obtained", "identity", id.String(), "peer", grpcpeer.Addr(ctx),
		"validity", req.GetValidityDuration())
	return resp, nil
}

// Authenticate reviews the bearer token of an incoming call as
// CreateCertificate does and returns the caller's namespace and service
// account; its error is a gRPC status saying why not. It neither logs nor
// counts a refusal: the caller does.
func (s *Server) Authenticate(ctx context.Context) (namespace, serviceAccount string, err error) {
	id, r, err := s.authenticate(ctx)
	if err != nil {
		return "", "", status.Error(r.code(), err.Error())
	}
	namespace, serviceAccount, _ = id.Workload()
	return namespace, serviceAccount, nil
}

// authenticate reviews the caller's bearer token and returns its workload
// identity, or the reason and error of a refusal.
func (s *Server) authenticate(ctx context.Context) (spiffeid.ID, Reason, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	token, err := parseBearer(md.Get(authorizationKey))
	if errors.Is(err, errNoToken) {
		return spiffeid.ID{}, ReasonMissingToken, err
	}
	if err != nil {
		return spiffeid.ID{}, ReasonMalformedToken, err
	}
	rctx, cancel := context.WithTimeout(ctx, s.opts.ReviewTimeout)
	defer cancel()
	rev, err := s.opts.Reviewer.Review(rctx, token, s.opts.Audiences)
	if err != nil {
		return spiffeid.ID{}, ReasonReviewUnavailable, fmt.Errorf("cannot check the token with the cluster's API server: %w", err)
	}
	if !rev.Authenticated {
		why := rev.Error
		if why == "" {
			why = "no reason given"
		}
		return spiffeid.ID{}, ReasonInvalidToken, fmt.Errorf("the cluster's API server did not authenticate the token for audiences %s: %s",
			quoted(s.opts.Audiences), why)
	}
	if !slices.ContainsFunc(rev.Audiences, func(a string) bool { return slices.Contains(s.opts.Audiences, a) }) {
		return spiffeid.ID{}, ReasonWrongAudience, fmt.Errorf("the token is valid for audiences %s, none of %s",
			quoted(rev.Audiences), quoted(s.opts.Audiences))
	}
	ns, sa, err := parseServiceAccount(rev.Username)
	if err != nil {
		return spiffeid.ID{}, ReasonNotServiceAccount, fmt.Errorf("the token is not a workload's: %w", err)
	}
	id, err := spiffeid.WorkloadID(s.opts.TrustDomain, ns, sa)
	if err != nil {
		return spiffeid.ID{}, ReasonNotServiceAccount, fmt.Errorf("service account %s/%s has no workload identity: %w", ns, sa, err)
	}
	return id, "", nil
}

// checkCSR parses csr strictly and requires that its only SAN be the URI
// id.
func checkCSR(csrPEM string, id spiffeid.ID) (Reason, error) {
	csr, err := certreq.Parse([]byte(csrPEM))
	if err != nil {
		return ReasonInvalidCSR, err
	}
	if len(csr.URIs) != 1 {
		uris := make([]string, len(csr.URIs))
		for i, u := range csr.URIs {
			uris[i] = u.String()
		}
		return ReasonIdentityMismatch, fmt.Errorf("csr: has %d URI SANs [%s]; want exactly %s", len(csr.URIs), strings.Join(uris, ", "), id)
	}
	if got := csr.URIs[0].String(); got != id.String() {
		return ReasonIdentityMismatch, fmt.Errorf("csr: URI SAN %s is not the token's identity %s", got, id)
	}
	switch {
	case len(csr.DNSNames) > 0:
		return ReasonIdentityMismatch, fmt.Errorf("csr: DNS SAN %q: a workload certificate from the spoke carries only %s", csr.DNSNames[0], id)
	case len(csr.IPAddresses) > 0:
		return ReasonIdentityMismatch, fmt.Errorf("csr: IP SAN %s: a workload certificate from the spoke carries only %s", csr.IPAddresses[0], id)
	case len(csr.EmailAddresses) > 0:
		return ReasonIdentityMismatch, fmt.Errorf("csr: email SAN %q: a workload certificate from the spoke carries only %s", csr.EmailAddresses[0], id)
	}
	return "", nil
}

// refuse counts and logs a refusal and returns its gRPC status.
func (s *Server) refuse(ctx context.Context, r Reason, identity string, err error) error {
	return s.refuseStatus(ctx, r, identity, status.New(r.code(), err.Error()))
}

func (s *Server) refuseStatus(ctx context.Context, r Reason, identity string, st *status.Status) error {
	now := s.opts.Now()
	s.mu.Lock()
	s.refusals[r]++
	s.last = &Refusal{Reason: r, Time: now, Identity: identity, Code: st.Code().String(), Message: st.Message()}
	s.mu.Unlock()
	s.metrics.refused(r)
	attrs := []any{"reason", string(r), "code", st.Code().String(), "peer", grpcpeer.Addr(ctx), "error", st.Message()}
	if identity != "" {
		attrs = append(attrs, "identity", identity)
	}
	s.log.Warn("workload certificate refused", attrs...)
	return st.Err()
}

// Refusal is the last request the RA refused.
type Refusal struct {
	Reason Reason    `json:"reason"`
	Time   time.Time `json:"time"`
	// Identity is the workload identity the token named, "" if it was
	// refused before that was known.
	Identity string `json:"identity,omitempty"`
	Code     string `json:"code"`
	Message  string `json:"message"`
}

// Status is what the RA has done since it started, for a debug endpoint.
type Status struct {
	TrustDomain string   `json:"trustDomain"`
	Audiences   []string `json:"audiences"`
	// Certificates counts certificates the hub issued through the RA.
	Certificates uint64 `json:"certificates"`
	// Refusals counts refusals by reason (every reason, zeros included).
	Refusals    map[Reason]uint64 `json:"refusals"`
	LastRefusal *Refusal          `json:"lastRefusal,omitempty"`
}

// Status returns the RA's counts and last refusal.
func (s *Server) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{TrustDomain: s.opts.TrustDomain, Audiences: slices.Clone(s.opts.Audiences), Certificates: s.issued,
		Refusals: make(map[Reason]uint64, len(Reasons))}
	for _, r := range Reasons {
		st.Refusals[r] = s.refusals[r]
	}
	if s.last != nil {
		l := *s.last
		st.LastRefusal = &l
	}
	return st
}

func quoted(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
