package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/navemesh/nave/shared/admin"
	"github.com/navemesh/nave/shared/grpcserve"
	"github.com/navemesh/nave/shared/handshake"
	"github.com/navemesh/nave/spoke/enroll"
	"github.com/navemesh/nave/spoke/fallback"
	"github.com/navemesh/nave/spoke/remote"
	"github.com/navemesh/nave/spoke/spokeconfig"
	"github.com/navemesh/nave/xds/ads"
)

// remoteView makes the remote view, loaded from hub.stateDir when a saved
// one is there (a spoke restarted during an outage serves from it). A
// saved view that does not verify is reported and ignored. It returns the
// file the view is saved to ("" without a state dir: not saved).
//
// With fallback false (no fallback server) the view holds only what this
// cluster's spoke needs of the hub (its MeshConfig, its Gateway API
// statuses), and no state dir is worth a warning.
func remoteView(cfg spokeconfig.Config, log *slog.Logger, adm *admin.Server, fallback bool, opts ...remote.Option) (*remote.View, string) {
	view := remote.New(cfg.Mesh, cfg.Cluster, opts...)
	adm.HandleDebug("remote", "the rest of the mesh as the hub last gave it on Watch: per remote cluster the objects held, the trust bundle, when it last changed", func(*http.Request) (any, error) {
		return view.Status(), nil
	})
	if cfg.Hub.StateDir == "" {
		if !fallback {
			return view, ""
		}
		log.Warn("no hub.stateDir: the remote view is kept in memory only, and a spoke restarted during an outage serves its own cluster alone")
		return view, ""
	}
	if err := os.MkdirAll(cfg.Hub.StateDir, 0o700); err != nil {
		log.Error("remote view not kept on disk", "dir", cfg.Hub.StateDir, "err", err)
		return view, ""
	}
	file := filepath.Join(cfg.Hub.StateDir, remote.File)
	switch err := view.Load(file); {
	case err == nil:
		st := view.Status()
		log.Info("remote view loaded", "file", file, "saved", st.Updated, "clusters", len(st.Clusters))
	case errors.Is(err, remote.ErrNoView):
		log.Info("no saved remote view yet", "file", file)
	default:
		log.Error("saved remote view refused; it is ignored until the hub sends a new one", "err", err)
	}
	return view, file
}

// runFallback serves the fallback xDS server on lis until ctx ends. With
// a renewer (TLS to the hub) it serves mTLS with the cluster certificate
// and authenticates proxies by their workload certificates; without, it
// is plaintext and trusts proxies' nodes, as a plaintext hub does.
//
// hs counts and logs its failed handshakes.
func runFallback(ctx context.Context, fb *fallback.Server, lis net.Listener, renewer *enroll.Renewer, hs *handshake.Failures) error {
	ka := keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}
	opts := []grpc.ServerOption{grpc.KeepaliveEnforcementPolicy(ka),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.ForceServerCodecV2(ads.Codec())}
	if renewer != nil {
		cert := func() (*tls.Certificate, error) {
			c := renewer.Credentials().Certificate
			return &c, nil
		}
		opts = append(opts, grpc.Creds(hs.Credentials("fallback.listen", credentials.NewTLS(fallback.ServerTLS(cert, fallbackTrust(fb.View(), renewer))))))
	}
	srv := grpc.NewServer(opts...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(srv, fb)
	if err := grpcserve.Serve(ctx, srv, lis, 5*time.Second); err != nil {
		return fmt.Errorf("fallback.listen: %w", err)
	}
	return nil
}

// fallbackTrust is the mesh's trust as the spoke knows it: the remote
// view's trust bundle (the hub's newest), else the enrollment's.
func fallbackTrust(view *remote.View, renewer *enroll.Renewer) fallback.Trust {
	return func() (string, []byte) {
		if tb := view.Trust(); tb != nil {
			return tb.GetTrustDomain(), []byte(tb.GetRootsPem())
		}
		c := renewer.Credentials()
		return c.TrustDomain, c.TrustBundle
	}
}

// newFallback builds the fallback server (not yet serving).
func newFallback(cfg spokeconfig.Config, view *remote.View, hubSynced func() error, renewer *enroll.Renewer,
	log *slog.Logger, reg prometheus.Registerer, adm *admin.Server) *fallback.Server {
	var authn ads.Authenticator
	var trust fallback.Trust
	if renewer != nil {
		trust = fallbackTrust(view, renewer)
		authn = fallback.Authenticator(cfg.Mesh, trust)
	}
	fb := fallback.New(fallback.Options{
		Mesh: cfg.Mesh, Cluster: cfg.Cluster, DomainSuffix: cfg.DomainSuffix,
		After: cfg.Fallback.After, HandBackAfter: cfg.Fallback.HandBackAfter, Drain: cfg.Fallback.Drain,
		HubSynced: hubSynced, View: view, Trust: trust,
		ADS:    ads.Options{Authenticator: authn},
		Logger: log, Registerer: reg,
	})
	adm.HandleDebug("fallback", "the fallback xDS server: active or not and since when, transitions, the hub's health as the spoke sees it, proxies served, the remote view", func(*http.Request) (any, error) {
		return fb.Status(), nil
	})
	return fb
}
