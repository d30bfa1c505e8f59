package ads

import (
	"context"
	"fmt"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/navemesh/nave/shared/grpcpeer"
	"github.com/navemesh/nave/xds/proxy"
)

// WorkloadIdentity is what a proxy's credentials prove: its mesh, and the
// workload (namespace, service account) it runs as.
type WorkloadIdentity struct {
	Mesh           string
	Namespace      string
	ServiceAccount string
	// Name names the identity in logs, e.g. its SPIFFE ID.
	Name string
}

// Authenticator decides a proxy stream's identity from its connection (for
// example its TLS client certificate). It is the one seam where a proxy's
// mesh is decided when set (docs/design.md invariant 2): the node may repeat
// what the identity says, never contradict it. Implementations must be safe
// for concurrent use.
type Authenticator interface {
	Authenticate(ctx context.Context) (WorkloadIdentity, error)
}

// AuthenticatorFunc adapts a function to Authenticator.
type AuthenticatorFunc func(ctx context.Context) (WorkloadIdentity, error)

// Authenticate calls f.
func (f AuthenticatorFunc) Authenticate(ctx context.Context) (WorkloadIdentity, error) { return f(ctx) }

// Refusal reasons, the label set of nave_xds_auth_refusals_total.
const (
	refusedUnauthenticated = "unauthenticated"
	refusedMesh            = "mesh_mismatch"
	refusedNamespace       = "namespace_mismatch"
	refusedServiceAccount  = "service_account_mismatch"
	refusedNotHosted       = "mesh_not_hosted"
)

func newAuthRefusals(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_xds_auth_refusals_total",
		Help: "Proxy streams refused because their credentials did not prove the identity their node claims, by reason."}, []string{"reason"})
	for _, r := range []string{refusedUnauthenticated, refusedMesh, refusedNamespace, refusedServiceAccount, refusedNotHosted} {
		c.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(c)
	}
	return c
}

// identify returns the proxy a stream's node describes, bound to what its
// credentials prove: without an Authenticator the node's own claims stand
// (plaintext mode); with one, the mesh is the identity's, and a node naming
// another mesh, namespace or service account is refused. Either way a mesh
// Options.Hosted does not serve is refused.
func (s *Server) identify(ctx context.Context, node *corev3.Node) (*proxy.Proxy, WorkloadIdentity, error) {
	if s.opts.Authenticator == nil {
		px, err := proxy.FromNode(node, s.opts.DefaultMesh)
		if err != nil {
			return nil, WorkloadIdentity{}, status.Error(codes.InvalidArgument, err.Error())
		}
		if err := s.checkHosted(ctx, node, px.Mesh); err != nil {
			return nil, WorkloadIdentity{}, err
		}
		return px, WorkloadIdentity{}, nil
	}
	id, err := s.opts.Authenticator.Authenticate(ctx)
	if err != nil {
		return nil, WorkloadIdentity{}, s.refuse(ctx, node, refusedUnauthenticated, codes.Unauthenticated, err.Error())
	}
	px, err := proxy.FromNode(node, id.Mesh)
	if err != nil {
		return nil, WorkloadIdentity{}, status.Error(codes.InvalidArgument, err.Error())
	}
	check := func(what, claimed, proven, reason string) error {
		if claimed != "" && claimed != proven {
			return s.refuse(ctx, node, reason, codes.PermissionDenied,
				fmt.Sprintf("node %q names %s %q, but its certificate (%s) is of %s %q", node.GetId(), what, claimed, id.Name, what, proven))
		}
		return nil
	}
	if err := check("mesh", px.Mesh, id.Mesh, refusedMesh); err != nil {
		return nil, WorkloadIdentity{}, err
	}
	if err := check("namespace", px.Namespace, id.Namespace, refusedNamespace); err != nil {
		return nil, WorkloadIdentity{}, err
	}
	if err := check("service account", px.ServiceAccount, id.ServiceAccount, refusedServiceAccount); err != nil {
		return nil, WorkloadIdentity{}, err
	}
	if err := s.checkHosted(ctx, node, px.Mesh); err != nil {
		return nil, WorkloadIdentity{}, err
	}
	px.Namespace, px.ServiceAccount = id.Namespace, id.ServiceAccount
	return px, id, nil
}

// checkHosted refuses a proxy of a mesh Options.Hosted does not serve.
func (s *Server) checkHosted(ctx context.Context, node *corev3.Node, mesh string) error {
	if s.opts.Hosted == nil || s.opts.Hosted(mesh) {
		return nil
	}
	msg := fmt.Sprintf("node %q is of mesh %q, which is not a mesh of this hub", node.GetId(), mesh)
	if s.opts.HostedNames != nil {
		msg += fmt.Sprintf(" (it serves %s)", strings.Join(s.opts.HostedNames(), ", "))
	}
	return s.refuse(ctx, node, refusedNotHosted, codes.PermissionDenied, msg)
}

// refuse logs an audit line, counts the refusal and returns the status the
// proxy gets.
func (s *Server) refuse(ctx context.Context, node *corev3.Node, reason string, code codes.Code, msg string) error {
	s.authRefusals.WithLabelValues(reason).Inc()
	s.log.Warn("proxy refused", "node", node.GetId(), "peer", grpcpeer.Addr(ctx), "reason", reason, "detail", msg)
	return status.Error(code, msg)
}
