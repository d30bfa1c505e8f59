// Command nave-hub is the central control plane: it takes spokes' Push
// streams, merges each mesh's clusters and serves xDS to proxies.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/navemesh/nave/hub/hubconfig"
	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/hub/watch"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/admin"
	"github.com/navemesh/nave/shared/logging"
	"github.com/navemesh/nave/shared/program"
	"github.com/navemesh/nave/xds/ads"
	"github.com/navemesh/nave/xds/cache"
	"github.com/navemesh/nave/xds/pushctx"
)

func main() {
	program.Main(hubconfig.Program, func(c *hubconfig.Config) logging.Config { return c.Log }, serve)
}

// listen binds every listener up front, so a taken port fails the start
// with the key that names it.
func listen(keys map[string]string) (map[string]net.Listener, error) {
	out := map[string]net.Listener{}
	for key, addr := range keys {
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			for _, l := range out {
				l.Close()
			}
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		out[key] = lis
	}
	return out, nil
}

func serve(ctx context.Context, cfg hubconfig.Config, log *slog.Logger) error {
	lis, err := listen(map[string]string{"admin.listen": cfg.Admin.Listen, "spokes.listen": cfg.Spokes.Listen, "xds.listen": cfg.XDS.Listen})
	if err != nil {
		return err
	}
	reg := admin.NewRegistry()
	adm := admin.New(log, reg)
	sec, err := newSecurity(ctx, cfg, log, reg)
	if err != nil {
		for _, l := range lis {
			l.Close()
		}
		return err
	}

	var (
		pc *pushctx.Publisher
		w  *watch.Server
	)
	in := ingest.New(sec.spokeAuthenticator(), ingest.Options{
		StaleGracePeriod: cfg.Ingest.StaleGracePeriod,
		Expected:         sec.expected(log),
		StartupGrace:     cfg.Ingest.StartupGrace,
		OnChange:         func(mesh string) { pc.Notify(mesh); w.Notify(mesh) },
		OnEndpointChange: func(mesh string) { pc.NotifyEndpoints(mesh); w.Notify(mesh) },
		Watch: func(id ingest.ClusterIdentity, stream protocolv1.Sync_WatchServer) error {
			return w.Serve(id.Mesh, id.Cluster, stream)
		},
		Logger:     log.With("component", "ingest"),
		Registerer: reg,
	})
	w = watch.New(in, watch.Options{Roots: sec.roots, MaxMessageBytes: cfg.Spokes.MaxMessageBytes, Ready: in.Ready,
		Logger: log.With("component", "watch"), Registerer: reg})
	var resources *cache.Cache
	pc = pushctx.New(in, pushctx.Options{
		DebounceQuiet: cfg.Push.DebounceQuiet,
		DebounceMax:   cfg.Push.DebounceMax,
		Adaptive:      cfg.Push.Adaptive,
		Ready:         in.Ready,
		OnPublish:     func(st *pushctx.State) { resources.Entry(st) },
		Logger:        log.With("component", "pushctx"),
		Registerer:    reg,
	})
	resources = cache.New(pc, cache.Options{
		Verify:                   cfg.Push.VerifyIncremental,
		MaxConcurrentGenerations: cfg.Push.MaxConcurrentGenerations,
		Logger:                   log.With("component", "cache"),
		Registerer:               reg,
	})
	xds := ads.New(resources, ads.Options{DefaultMesh: cfg.XDS.DefaultMesh, SendTimeout: cfg.XDS.SendTimeout,
		AdmissionRate: cfg.XDS.AdmissionRate, AdmissionBurst: cfg.XDS.AdmissionBurst, MaxInflightBytes: cfg.XDS.MaxInflightBytes,
		Meshes: sec.meshes, Authenticator: sec.proxyAuthenticator(), Secrets: sec.secrets(), Logger: log.With("component", "ads"), Registerer: reg})
	registerDebug(adm, in, resources, xds)
	adm.HandleDebug("watch", "spokes' Watch streams: mesh, cluster, whether the initial view was ACKed, ACKs and NACKs", func(*http.Request) (any, error) {
		return w.Status(), nil
	})
	sec.debug(adm)

	ka := keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}
	spokeSrv := grpc.NewServer(append(sec.serverOptions(cfg),
		grpc.MaxRecvMsgSize(cfg.Spokes.MaxMessageBytes), grpc.MaxSendMsgSize(cfg.Spokes.MaxMessageBytes),
		grpc.KeepaliveEnforcementPolicy(ka))...)
	protocolv1.RegisterSyncServer(spokeSrv, in)
	xdsSrv := grpc.NewServer(append(sec.serverOptions(cfg), grpc.KeepaliveEnforcementPolicy(ka),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}))...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(xdsSrv, xds)
	sec.register(cfg, spokeSrv, xdsSrv, log, reg)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pc.Start(ctx)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return adm.Serve(gctx, lis["admin.listen"]) })
	// A revoked cluster loses its Watch streams with its Push stream.
	withdraw := func(id ingest.ClusterIdentity, reason string) bool {
		closed := w.Close(id.Mesh, id.Cluster, reason) > 0
		return in.Withdraw(id, reason) || closed
	}
	if e := sec.enforcer(withdraw, log, reg); e != nil {
		g.Go(func() error { return e.Run(gctx) })
	}
	for key, srv := range map[string]*grpc.Server{"spokes.listen": spokeSrv, "xds.listen": xdsSrv} {
		g.Go(func() error {
			if err := srv.Serve(lis[key]); err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			return nil
		})
		g.Go(func() error {
			<-gctx.Done()
			stopGracefully(srv, 5*time.Second)
			return nil
		})
	}
	adm.AddReadyCheck("listeners", func() error { return nil })
	log.Info("hub serving", "spokes", cfg.Spokes.Listen, "xds", cfg.XDS.Listen, "admin", cfg.Admin.Listen, "tls", !sec.plaintext, "state", cfg.State.Dir)
	return g.Wait()
}

// stopGracefully lets open RPCs finish for up to d, then cuts them.
func stopGracefully(srv *grpc.Server, d time.Duration) {
	done := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
		srv.Stop()
	}
}
