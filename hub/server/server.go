// Package server is the hub's composition, what nave-hub runs: the
// listeners, the security (mesh CAs, serving certificate, enrollment),
// ingest of the spokes' streams, the Watch server, the xDS engine
// (xds/engine), the replica set, the poller of polled spokes and the admin
// server with its debug views, wired together. New builds a hub and binds
// its listeners; Run serves until its context ends. Tests, a replica or
// the load tool start a hub with it without copying its wiring.
package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/navemesh/nave/hub/hubconfig"
	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/hub/tenants"
	"github.com/navemesh/nave/hub/watch"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/admin"
	"github.com/navemesh/nave/shared/grpcserve"
	"github.com/navemesh/nave/shared/memrelease"
	"github.com/navemesh/nave/shared/meshlimits"
	"github.com/navemesh/nave/xds/ads"
	"github.com/navemesh/nave/xds/cache"
	"github.com/navemesh/nave/xds/engine"
	"github.com/navemesh/nave/xds/pushctx"
)

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

// Server is one hub, built by New and run once by Run. Addr is safe for
// concurrent use.
type Server struct {
	cfg      hubconfig.Config
	log      *slog.Logger
	reg      *prometheus.Registry
	lis      map[string]net.Listener
	adm      *admin.Server
	sec      *security
	svc      *tenants.Service // nil in plaintext mode
	meshes   *tenants.Registry
	life     *meshLife
	rep      *replicas
	store    *ingest.Store
	in       *ingest.Server
	w        *watch.Server
	eng      *engine.Engine
	spokeSrv *grpc.Server
	xdsSrv   *grpc.Server
	// limits are each mesh's limits; limitMetrics what each uses of them.
	limits       meshLimits
	limitMetrics *meshlimits.Metrics
	// mem returns the heap's free memory once the hub is quiet
	// (memory.idleRelease).
	mem *memrelease.Releaser
}

// Serve runs a hub with cfg until ctx ends (New, then Run): nave-hub's
// life.
func Serve(ctx context.Context, cfg hubconfig.Config, log *slog.Logger) error {
	s, err := New(ctx, cfg, log)
	if err != nil {
		return err
	}
	return s.Run(ctx)
}

// New builds a hub: it loads its state (mesh CAs, serving certificate,
// enrollment; ctx bounds that), binds every listener, so that a taken port
// fails here with the key that names it, and wires the parts. Nothing is
// served before Run, which closes the listeners when it returns.
func New(ctx context.Context, cfg hubconfig.Config, log *slog.Logger) (*Server, error) {
	reg := admin.NewRegistry()
	rep, err := newReplicas(cfg, reg)
	if err != nil {
		return nil, err
	}
	addrs := map[string]string{"admin.listen": cfg.Admin.Listen, "spokes.listen": cfg.Spokes.Listen, "xds.listen": cfg.XDS.Listen}
	if cfg.Admin.OperatorListen != "" {
		addrs["admin.operatorListen"] = cfg.Admin.OperatorListen
	}
	if rep != nil {
		addrs["replicas.relayListen"] = cfg.Replicas.RelayListen
	}
	lis, err := listen(addrs)
	if err != nil {
		return nil, err
	}
	adm := admin.New(log, reg)
	svc, meshes, err := openMeshes(ctx, cfg, log)
	if err != nil {
		for _, l := range lis {
			l.Close()
		}
		return nil, err
	}
	sec, err := newSecurity(ctx, cfg, meshes, log, reg)
	if err != nil {
		for _, l := range lis {
			l.Close()
		}
		return nil, err
	}

	var (
		eng *engine.Engine
		w   *watch.Server
	)
	// Each mesh's limits: its record's own, else the hub's defaults.
	limits := meshLimits{defaults: hubLimits(cfg), registry: meshes}
	limitMetrics := meshlimits.NewMetrics(reg)
	store := ingest.NewStore(ingest.StoreOptions{
		StaleGracePeriod: cfg.Ingest.StaleGracePeriod,
		Expected:         sec.expected(log),
		Synced:           sec.remember(log),
		StartupGrace:     cfg.Ingest.StartupGrace,
		OnChange: func(mesh string, endpointsOnly bool) {
			if endpointsOnly {
				eng.NotifyEndpoints(mesh)
			} else {
				eng.Notify(mesh)
			}
			w.Notify(mesh)
		},
		Replicas:     rep.replicaSet(),
		Logger:       log.With("component", "ingest"),
		Registerer:   reg,
		LimitMetrics: limitMetrics,
	})
	in := ingest.NewServer(store, sec.spokeAuthenticator(), ingest.ServerOptions{
		MaxMessageBytes: cfg.Spokes.MaxMessageBytes,
		Limits:          limits.ingest,
		Watch: func(id ingest.ClusterIdentity, stream protocolv1.Sync_WatchServer) error {
			return w.Serve(id.Mesh, id.Cluster, stream)
		},
		Logger:     log.With("component", "ingest"),
		Registerer: reg,
		Hosted:     meshes.Hosted,
	})
	// The hub's statuses of each cluster's Gateway API objects reach its
	// spoke on Watch, from each newest snapshot.
	gwStatuses := &gatewayAPIStatuses{
		current: func(mesh string) *pushctx.State { st, _ := eng.Publisher().Current(mesh); return st },
		notify:  func(mesh string) { w.Notify(mesh) },
	}
	w = watch.New(store, watch.Options{Roots: sec.roots, MaxMessageBytes: cfg.Spokes.MaxMessageBytes, Ready: store.Ready, Hosted: meshes.Hosted,
		MeshConfig: meshConfigOf(meshes), MeshNetworks: meshNetworksOf(meshes), GatewayAPIStatus: gwStatuses.of,
		Logger: log.With("component", "watch"), Registerer: reg})
	eng = engine.New(store, engine.Options{
		Push: pushctx.Options{
			MeshConfig:      meshConfigOf(meshes),
			MeshNetworks:    meshNetworksOf(meshes),
			DebounceQuiet:   cfg.Push.DebounceQuiet,
			DebounceMax:     cfg.Push.DebounceMax,
			DebounceEdge:    cfg.Push.DebounceEdge,
			Adaptive:        cfg.Push.Adaptive,
			Ready:           store.Ready,
			TrustDomain:     sec.trustDomain,
			PushesPerSecond: limits.pushesPerSecond,
			LimitMetrics:    limitMetrics,
			OnPublish:       gwStatuses.published,
			Logger:          log.With("component", "pushctx"),
		},
		Cache: cache.Options{
			Verify:                   cfg.Push.VerifyIncremental,
			MaxConcurrentGenerations: cfg.Push.MaxConcurrentGenerations,
			Logger:                   log.With("component", "cache"),
		},
		ADS: ads.Options{DefaultMesh: cfg.XDS.DefaultMesh, SendTimeout: cfg.XDS.SendTimeout,
			AdmissionRate: cfg.XDS.AdmissionRate, AdmissionBurst: cfg.XDS.AdmissionBurst, MaxInflightBytes: cfg.XDS.MaxInflightBytes,
			Hosted: meshes.Hosted, HostedNames: meshes.Names, Authenticator: sec.proxyAuthenticator(), Secrets: sec.secrets(cfg.SDS.MintKeys),
			MaxProxies: limits.proxies, LimitMetrics: limitMetrics, Logger: log.With("component", "ads")},
		Registerer: reg,
	})
	reg.MustRegister(eng.SyncStateCollector())
	// From here on, a mesh's change (created, deleted, re-created,
	// updated) is served by this replica as it lands in the registry.
	life := &meshLife{reg: meshes, sec: sec, store: store, w: w, eng: eng, gwStatuses: gwStatuses, limits: limitMetrics, log: log.With("component", "meshes")}
	meshes.Subscribe(life.changed)
	registerDebug(adm, meshes, store, eng)
	if svc != nil {
		svc.RegisterAPI(adm, tenants.APIOptions{ConnectedSpokes: func(mesh string) int { return connectedSpokes(store, mesh) },
			Usage: func(mesh string) map[string]float64 { return limitMetrics.Of(mesh).Flat() }})
	}
	adm.HandleDebug("watch", "spokes' Watch streams: mesh, cluster, whether the initial view was ACKed, ACKs and NACKs", func(*http.Request) (any, error) {
		return w.Status(), nil
	})
	sec.debug(adm)

	ka := keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}
	spokeSrv := grpc.NewServer(append(sec.serverOptions(cfg, "spokes.listen", adm.Handshakes()),
		grpc.MaxRecvMsgSize(cfg.Spokes.MaxMessageBytes), grpc.MaxSendMsgSize(cfg.Spokes.MaxMessageBytes),
		grpc.KeepaliveEnforcementPolicy(ka))...)
	protocolv1.RegisterSyncServer(spokeSrv, in)
	xdsKA := keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}
	if age := cfg.XDS.MaxConnectionAge; age > 0 {
		xdsKA.MaxConnectionAge, xdsKA.MaxConnectionAgeGrace = age, 30*time.Second
	}
	xdsSrv := grpc.NewServer(append(append(sec.serverOptions(cfg, "xds.listen", adm.Handshakes()), grpc.KeepaliveEnforcementPolicy(ka),
		grpc.KeepaliveParams(xdsKA), grpc.ForceServerCodecV2(ads.Codec())), rep.xdsServerOptions()...)...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(xdsSrv, eng.ADS())
	sec.register(cfg, spokeSrv, xdsSrv, log, reg)

	if rep != nil {
		// The replica counts (and may shed) the proxy connections.
		lis["xds.listen"] = rep.track(lis["xds.listen"])
	}
	return &Server{cfg: cfg, log: log, reg: reg, lis: lis, adm: adm, sec: sec, svc: svc, meshes: meshes, life: life, rep: rep, store: store, in: in, w: w, eng: eng,
		spokeSrv: spokeSrv, xdsSrv: xdsSrv, limits: limits, limitMetrics: limitMetrics,
		mem: memrelease.New(memrelease.Options{Quiet: cfg.Memory.IdleRelease, Registerer: reg, Logger: log.With("component", "memory")})}, nil
}

// Addr is the address of the listener of the config key (xds.listen,
// spokes.listen, admin.listen, admin.operatorListen,
// replicas.relayListen); nil if the hub has none.
func (s *Server) Addr(key string) net.Addr {
	if l := s.lis[key]; l != nil {
		return l.Addr()
	}
	return nil
}

// ConnectedSpokes counts the clusters of mesh connected to the replica
// set, as this replica sees them (its own spokes and those its peers
// relay): what a delete of a mesh with spokes still connected is told.
func (s *Server) ConnectedSpokes(mesh string) int { return connectedSpokes(s.store, mesh) }

// Purge deletes what the hub keeps of mesh, which no replica serves any
// longer (Deleting): its enrollment state (join tokens, enrolled clusters,
// revocations) and, unless keepCA, its CA. It is the hub's tenants.Purger:
// a mesh re-created with the name inherits none of it. It refuses a mesh
// that is served.
func (s *Server) Purge(ctx context.Context, mesh string, keepCA bool) error {
	return s.sec.purge(ctx, mesh, keepCA)
}

// Run serves until ctx ends or a part fails, then stops every part and
// closes the listeners. It is called once.
func (s *Server) Run(ctx context.Context) error {
	cfg, log, lis, adm, sec, rep, store, in, w, eng := s.cfg, s.log, s.lis, s.adm, s.sec, s.rep, s.store, s.in, s.w, s.eng
	spokeSrv, xdsSrv, reg := s.spokeSrv, s.xdsSrv, s.reg
	defer func() {
		for _, l := range lis {
			l.Close() // already closed by the server that served it, if any
		}
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	eng.Start(ctx)
	g, gctx := errgroup.WithContext(ctx)
	// A revoked cluster loses its Watch streams with its Push stream.
	withdraw := func(id ingest.ClusterIdentity, reason string) bool {
		closed := w.Close(id.Mesh, id.Cluster, reason) > 0
		return store.Withdraw(id, reason) || closed
	}
	if !sec.plaintext {
		g.Go(func() error {
			return sec.authority.RefreshEvery(gctx, cfg.CA.RefreshInterval, func(mesh string) { eng.Notify(mesh); w.Notify(mesh) })
		})
		g.Go(func() error { return s.life.reconcileEvery(gctx, cfg.CA.RefreshInterval) })
	}
	if s.svc != nil {
		// Keeps the registry current; deleted meshes are purged by s.
		g.Go(func() error { return s.svc.Run(gctx, s) })
	}
	if e := sec.enforcer(withdraw, log, reg); e != nil {
		g.Go(func() error { return e.Run(gctx) })
	}
	for key, srv := range map[string]*grpc.Server{"spokes.listen": spokeSrv, "xds.listen": xdsSrv} {
		g.Go(func() error {
			if err := grpcserve.Serve(gctx, srv, lis[key], 5*time.Second); err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			return nil
		})
	}
	if rep != nil {
		if err := rep.start(gctx, cfg, sec, ingest.NewOwnership(in), store, lis["replicas.relayListen"], adm, log, g.Go); err != nil {
			cancel()
			_ = g.Wait()
			return err
		}
	}
	if p := newPoller(cfg, sec, rep, in, adm, log.With("component", "poll"), reg); p != nil {
		g.Go(func() error { return p.Run(gctx) })
	}
	g.Go(func() error { s.mem.Run(gctx); return nil })
	// Served once every ready check is in place.
	if op := lis["admin.operatorListen"]; op != nil {
		// The debug views, profiles and metrics go to authenticated
		// operators, by scope; the plain listener keeps probes and metrics.
		tlsCfg, err := sec.operatorTLS()
		if err != nil {
			return err
		}
		g.Go(func() error { return adm.ServeHandler(gctx, op, adm.OperatorHandler(operatorScope), tlsCfg) })
		g.Go(func() error { return adm.ServeHandler(gctx, lis["admin.listen"], adm.ProbeHandler(), nil) })
	} else {
		g.Go(func() error { return adm.Serve(gctx, lis["admin.listen"]) })
	}
	adm.AddReadyCheck("listeners", func() error { return nil })
	log.Info("hub serving", "spokes", cfg.Spokes.Listen, "xds", cfg.XDS.Listen, "admin", cfg.Admin.Listen, "operatorAdmin", cfg.Admin.OperatorListen,
		"tls", !sec.plaintext, "state", cfg.State.Dir)
	return g.Wait()
}
