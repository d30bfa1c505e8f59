package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	pb "istio.io/api/security/v1alpha1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/navemesh/nave/shared/admin"
	"github.com/navemesh/nave/shared/kubeconfig"
	"github.com/navemesh/nave/spoke/enroll"
	"github.com/navemesh/nave/spoke/gatewaycert"
	"github.com/navemesh/nave/spoke/ra"
	"github.com/navemesh/nave/spoke/spokeconfig"
)

// raEnabled reports whether the spoke runs a registration authority: it
// needs the cluster's API server to review tokens, and a certificate to
// vouch for workloads with.
func raEnabled(cfg spokeconfig.Config) bool {
	return cfg.IsKubernetes() && !cfg.Hub.Plaintext && cfg.RA.Listen != ""
}

// runRA serves the registration authority on lis until ctx ends: tokens
// reviewed with the cluster's API server (a client of its own, so reviews
// do not queue behind the watches' rate limit), certificates obtained from
// the hub over the spoke's mTLS connection, served with the spoke's current
// cluster certificate.
func runRA(ctx context.Context, cfg spokeconfig.Config, renewer *enroll.Renewer, lis net.Listener, adm *admin.Server, log *slog.Logger, reg prometheus.Registerer) error {
	rc, err := kubeconfig.Load(cfg.Kube.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kubernetes.kubeconfig: %w", err)
	}
	rc.QPS, rc.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("ra: %w", err)
	}
	hub := &hubCA{address: cfg.Hub.Address, renewer: renewer}
	if _, err := hub.client(); err != nil {
		return err
	}
	defer hub.close()
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("ra: %w", err)
	}
	// Gateways' credentialName certificates, served on the RA's listener
	// to the agents it authenticates (decision 038).
	var srv *ra.Server
	creds, err := gatewaycert.New(gatewaycert.Options{Client: cs, Dynamic: dyn, Logger: log.With("component", "gateway-credentials"), Registerer: reg,
		Authenticate: func(ctx context.Context) (string, string, error) { return srv.Authenticate(ctx) }})
	if err != nil {
		return err
	}
	srv, err = ra.New(ra.Options{
		Reviewer: ra.KubeReviewer(cs), TrustDomain: renewer.Credentials().TrustDomain, Audiences: cfg.RA.Audiences,
		Hub: hub, Logger: log, Registerer: reg, Handshakes: adm.Handshakes(),
		Services: []func(grpc.ServiceRegistrar){creds.Register},
	})
	if err != nil {
		return fmt.Errorf("ra: %w", err)
	}
	adm.HandleDebug("gateway-credentials", "gateways' credentialName secrets asked of the spoke: each agent's names, served or why not (never a key), refusals by reason", func(*http.Request) (any, error) {
		return creds.Status(), nil
	})
	adm.HandleDebug("ra", "the registration authority: certificates obtained for workloads, refusals by reason, the last refusal", func(*http.Request) (any, error) {
		return srv.Status(), nil
	})
	log.Info("registration authority serving", "listen", lis.Addr().String(), "audiences", cfg.RA.Audiences)
	return srv.Serve(ctx, lis, func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		c := renewer.Credentials().Certificate
		return &c, nil
	})
}

// hubCA is Istio's CA API at the hub over a connection made with the
// spoke's current cluster certificate: a TLS connection presents the
// certificate of its handshake for as long as it lives, so after each
// renewal the next call dials anew (the previous connection is closed a
// minute later, when calls on it are done). Without it, the RA would go on
// presenting a certificate the hub no longer accepts: expired, or of a
// root dropped by a rotation. Safe for concurrent use.
type hubCA struct {
	address string
	renewer *enroll.Renewer

	mu   sync.Mutex
	conn *grpc.ClientConn
	leaf *x509.Certificate // the certificate conn was made with
}

// hubConnGrace is how long a replaced connection stays open.
const hubConnGrace = time.Minute

func (h *hubCA) client() (pb.IstioCertificateServiceClient, error) {
	cur := h.renewer.Credentials().Certificate.Leaf
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn == nil || !h.leaf.Equal(cur) {
		conn, err := grpc.NewClient(h.address, grpc.WithTransportCredentials(credentials.NewTLS(h.renewer.ClientTLS())))
		if err != nil {
			return nil, fmt.Errorf("ra: hub address %q: %w", h.address, err)
		}
		if old := h.conn; old != nil {
			time.AfterFunc(hubConnGrace, func() { old.Close() })
		}
		h.conn, h.leaf = conn, cur
	}
	return pb.NewIstioCertificateServiceClient(h.conn), nil
}

// CreateCertificate implements pb.IstioCertificateServiceClient.
func (h *hubCA) CreateCertificate(ctx context.Context, in *pb.IstioCertificateRequest, opts ...grpc.CallOption) (*pb.IstioCertificateResponse, error) {
	c, err := h.client()
	if err != nil {
		return nil, err
	}
	return c.CreateCertificate(ctx, in, opts...)
}

func (h *hubCA) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn != nil {
		h.conn.Close()
	}
}
