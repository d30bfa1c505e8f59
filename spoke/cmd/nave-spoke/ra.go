package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	pb "istio.io/api/security/v1alpha1"
	"k8s.io/client-go/kubernetes"

	"github.com/navemesh/nave/shared/admin"
	"github.com/navemesh/nave/shared/kubeconfig"
	"github.com/navemesh/nave/spoke/enroll"
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
	conn, err := grpc.NewClient(cfg.Hub.Address, grpc.WithTransportCredentials(credentials.NewTLS(renewer.ClientTLS())))
	if err != nil {
		return fmt.Errorf("ra: hub address %q: %w", cfg.Hub.Address, err)
	}
	defer conn.Close()
	srv, err := ra.New(ra.Options{
		Reviewer: ra.KubeReviewer(cs), TrustDomain: renewer.Credentials().TrustDomain, Audiences: cfg.RA.Audiences,
		Hub: pb.NewIstioCertificateServiceClient(conn), Logger: log, Registerer: reg,
	})
	if err != nil {
		return fmt.Errorf("ra: %w", err)
	}
	adm.HandleDebug("ra", "the registration authority: certificates obtained for workloads, refusals by reason, the last refusal", func(*http.Request) (any, error) {
		return srv.Status(), nil
	})
	log.Info("registration authority serving", "listen", lis.Addr().String(), "audiences", cfg.RA.Audiences)
	return srv.Serve(ctx, lis, func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		c := renewer.Credentials().Certificate
		return &c, nil
	})
}
