// Package server is the spoke's composition, what nave-spoke runs: the
// source of the cluster's config (spoke/source/files or spoke/source/kube),
// the uplink that pushes it to the hub over a stream it dials (or, in
// polled mode, serves), the cluster identity it proves with a certificate
// it gets by enrolling (spoke/enroll, docs/enrollment.md), and, as
// configured, the registration authority (spoke/ra), the fallback xDS
// server (spoke/fallback), the validation webhook and sidecar injector
// (spoke/admission, spoke/inject; docs/webhooks.md, docs/injection.md) and
// the admin server with its debug views. New builds a spoke and binds its
// listeners; Run serves until its context ends.
package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/navemesh/nave/shared/admin"
	"github.com/navemesh/nave/shared/execpages"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/spoke/remote"
	"github.com/navemesh/nave/spoke/source/kube"
	"github.com/navemesh/nave/spoke/spokeconfig"
	"github.com/navemesh/nave/spoke/uplink"
)

// Server is one spoke, built by New and run once by Run. Addr is safe for
// concurrent use.
type Server struct {
	cfg                               spokeconfig.Config
	log                               *slog.Logger
	reg                               *prometheus.Registry
	adm                               *admin.Server
	lis, raLis, whLis, fbLis, pollLis net.Listener
	id                                *hubIdentity
	wh                                *webhook
	src                               source
	// gwStatus takes the hub's Gateway API statuses for this cluster
	// (spoke/remote's OnGatewayAPIStatus) and the source's publishes.
	gwStatus gatewayStatuses
	// view is the remote view once Run made it (the injector reads the
	// mesh's MeshConfig from it).
	view *atomic.Pointer[remote.View]
	// settle, if set, lets go of the memory a phase of the spoke's start
	// used once it is over (Serve sets it: it acts on the whole process).
	settle func()
}

// namespaceNetwork is the network of a namespace's proxies whose pod says
// none (the injector's Options.Network): the kubernetes source's view of
// the namespace's label, else the spoke's network.
func namespaceNetwork(cfg spokeconfig.Config, src source) func(namespace string) string {
	if k, ok := src.(*kube.Source); ok {
		return k.NamespaceNetwork
	}
	return func(string) string { return cfg.Network }
}

// meshConfigOf returns the mesh's MeshConfig as view holds it once set;
// nil (Istio's defaults) before.
func meshConfigOf(view *atomic.Pointer[remote.View]) func() *meshv1alpha1.MeshConfig {
	return func() *meshv1alpha1.MeshConfig {
		if v := view.Load(); v != nil {
			return v.MeshConfig()
		}
		return nil
	}
}

// Serve runs a spoke with cfg until ctx ends (New, then Run): nave-spoke's
// life.
func Serve(ctx context.Context, cfg spokeconfig.Config, log *slog.Logger) error {
	setGCPercent(cfg.GCPercent, log)
	s, err := New(cfg, log)
	if err != nil {
		return err
	}
	s.settle = func() { settle(log) }
	settle(log)
	return s.Run(ctx)
}

// New builds a spoke: it binds every listener, so that a taken port fails
// here with the key that names it, and builds the source and the webhook.
// Nothing is served before Run.
func New(cfg spokeconfig.Config, log *slog.Logger) (*Server, error) {
	lis, err := net.Listen("tcp", cfg.Admin.Listen)
	if err != nil {
		return nil, fmt.Errorf("admin.listen: %w", err)
	}
	reg := admin.NewRegistry()
	adm := admin.New(log, reg)

	var raLis, whLis, fbLis, pollLis net.Listener
	closeAll := func() {
		for _, l := range []net.Listener{lis, raLis, whLis, fbLis, pollLis} {
			if l != nil {
				l.Close()
			}
		}
	}
	if raEnabled(cfg) {
		if raLis, err = net.Listen("tcp", cfg.RA.Listen); err != nil {
			closeAll()
			return nil, fmt.Errorf("ra.listen: %w", err)
		}
	}
	if cfg.Fallback.Enabled {
		if fbLis, err = net.Listen("tcp", cfg.Fallback.Listen); err != nil {
			closeAll()
			return nil, fmt.Errorf("fallback.listen: %w", err)
		}
	}
	polled := cfg.Hub.Mode == spokeconfig.ModePolled
	if polled {
		if pollLis, err = net.Listen("tcp", cfg.Hub.PollListen); err != nil {
			closeAll()
			return nil, fmt.Errorf("hub.pollListen: %w", err)
		}
	}
	id := newHubIdentity(cfg, log.With("component", "identity"), reg)
	view := new(atomic.Pointer[remote.View])
	s := new(Server)
	src, gwStatus, err := newSource(cfg, log, reg, adm, s.settleListed)
	if err != nil {
		closeAll()
		return nil, err
	}
	var wh *webhook
	if cfg.Webhook.Listen != "" { // validated: only with the kubernetes source
		if whLis, err = net.Listen("tcp", cfg.Webhook.Listen); err != nil {
			closeAll()
			return nil, fmt.Errorf("webhook.listen: %w", err)
		}
		if wh, err = newWebhook(cfg, whLis, adm, log.With("component", "webhook"), reg, id.trust, meshConfigOf(view), namespaceNetwork(cfg, src)); err != nil {
			closeAll()
			return nil, err
		}
	}
	adm.HandleDebug("objects", "valid config objects loaded from the source, as pushed to the hub", func(*http.Request) (any, error) {
		type view struct {
			Kind      string `json:"kind"`
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
			Version   string `json:"version"`
			Origin    string `json:"origin"`
		}
		out := []view{}
		for _, o := range src.Objects() {
			out = append(out, view{o.Kind.Kind, o.Namespace, o.Name, o.Version, o.Origin})
		}
		return out, nil
	})
	adm.AddReadyCheck("identity", id.ready)
	adm.HandleDebug("identity", "the identity the spoke proves to the hub: mesh, cluster, trust domain, certificate serial, expiry and next renewal, "+
		"the pins of the hub CA it trusts; or why it is not enrolled yet; or plaintext", id.debug)

	*s = Server{cfg: cfg, log: log, reg: reg, adm: adm, lis: lis, raLis: raLis, whLis: whLis, fbLis: fbLis, pollLis: pollLis, view: view,
		id: id, wh: wh, src: src, gwStatus: gwStatus}
	return s, nil
}

// settleListed settles, when Serve asked for settles, once the source's
// initial lists are in: their decoding's garbage and the pages the start
// faulted in go before the first build and the uplink's encoding add
// their own (docs/decisions/053-spoke-settles-after-start.md).
func (s *Server) settleListed() {
	if s.settle != nil {
		s.settle()
	}
}

// Addr is the address of the listener of the config key (admin.listen,
// ra.listen, webhook.listen, fallback.listen, hub.pollListen); nil if the
// spoke has none.
func (s *Server) Addr(key string) net.Addr {
	l := map[string]net.Listener{"admin.listen": s.lis, "ra.listen": s.raLis, "webhook.listen": s.whLis,
		"fallback.listen": s.fbLis, "hub.pollListen": s.pollLis}[key]
	if l == nil {
		return nil
	}
	return l.Addr()
}

// Run serves until ctx ends or a part fails. The admin server starts
// first, so that metrics and debug views are served while the spoke waits
// for the hub to enroll it; the uplink and the source start once it has
// its identity (readiness fails until then). It is called once.
func (s *Server) Run(ctx context.Context) error {
	cfg, log, reg, adm, id, wh, src := s.cfg, s.log, s.reg, s.adm, s.id, s.wh, s.src
	lis, raLis, fbLis, pollLis := s.lis, s.raLis, s.fbLis, s.pollLis
	polled := cfg.Hub.Mode == spokeconfig.ModePolled
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return adm.Serve(gctx, lis) })
	g.Go(func() error { return s.gwStatus.Run(gctx) })
	publish := s.gwStatus.SetObjects
	if wh != nil {
		g.Go(func() error { return wh.run(gctx) })
		publish = func(objs []*meshconfig.Object) {
			wh.validator.Update(objs)
			s.gwStatus.SetObjects(objs)
		}
	}
	g.Go(func() error {
		renewer, err := id.establish(gctx)
		if err != nil {
			if gctx.Err() != nil {
				return nil // stopped while enrolling
			}
			return err
		}
		var hubTLS *tls.Config // plaintext
		if renewer != nil {
			hubTLS = renewer.ClientTLS()
			g.Go(func() error { return renewer.Run(gctx) })
			if raLis != nil {
				g.Go(func() error { return runRA(gctx, cfg, renewer, raLis, adm, log.With("component", "ra"), reg) })
			}
		} else if raLis != nil {
			raLis.Close()
		}
		// The view: the rest of the mesh for a fallback; without one, the
		// mesh's MeshConfig (the injector's defaultConfig) and the hub's
		// Gateway API statuses of this cluster alone.
		rv, viewFile := remoteView(cfg, log.With("component", "remote"), adm, fbLis != nil, remote.OnGatewayAPIStatus(s.gwStatus.SetStatuses))
		s.view.Store(rv)
		upOpts := uplink.Options{
			Address: cfg.Hub.Address, Mesh: cfg.Mesh, Cluster: cfg.Cluster, DomainSuffix: cfg.DomainSuffix, TLS: hubTLS,
			BackoffInitial: cfg.Hub.BackoffInitial, BackoffMax: cfg.Hub.BackoffMax, MaxMessageBytes: cfg.Hub.MaxMessageBytes,
			View: rv, ViewFile: viewFile, NoRemoteConfig: fbLis == nil, OnSynced: s.settle,
			Logger: log.With("component", "uplink"), Registerer: reg,
		}
		if polled {
			// The hub dials in, Poll and (with a view) PollWatch.
			upOpts.Polled, upOpts.Address = true, cfg.Hub.PollListen
		}
		up := uplink.New(upOpts)
		update := up.Update
		if fbLis != nil {
			fb := newFallback(cfg, rv, up.Synced, renewer, log.With("component", "fallback"), reg, adm)
			g.Go(func() error { return fb.Run(gctx) })
			g.Go(func() error { return runFallback(gctx, fb, fbLis, renewer, adm.Handshakes()) })
			update = func(objs []*meshconfig.Object) {
				up.Update(objs)
				fb.Update(objs)
			}
		}
		adm.HandleDebug("uplink", "the hub stream: mode (push, or polled and by which hub), state, last error, resources ACKed, resources the hub NACKed and why", func(*http.Request) (any, error) {
			return up.Status(), nil
		})
		var built sync.Once
		g.Go(func() error {
			return src.Run(gctx, func(objs []*meshconfig.Object) {
				if s.settle != nil {
					// The source's initial state is built: what its
					// initial lists and first build used is garbage,
					// before the uplink encodes the state.
					built.Do(s.settle)
				}
				update(objs)
				publish(objs)
			})
		})
		log.Info("spoke running", "source", cfg.Source, "mesh", cfg.Mesh, "cluster", cfg.Cluster, "hub", cfg.Hub.Address,
			"mode", cfg.Hub.Mode, "tls", hubTLS != nil, "admin", cfg.Admin.Listen)
		if polled {
			log.Info("polled mode: waiting for the hub to dial", "pollListen", pollLis.Addr().String())
			return runPolled(gctx, up, pollLis, renewer, adm.Handshakes())
		}
		return up.Run(gctx)
	})
	return g.Wait()
}

// setGCPercent sets the process's garbage collection target to percent
// (gcPercent), unless GOGC is set in the environment or percent is 0.
func setGCPercent(percent int, log *slog.Logger) {
	if percent <= 0 {
		return
	}
	if env, ok := os.LookupEnv("GOGC"); ok {
		log.Info("gcPercent not applied: GOGC is set", "GOGC", env)
		return
	}
	debug.SetGCPercent(percent)
}

// settle lets go of what a phase of the spoke's start used, at its end
// (built, the kubernetes source's initial lists in, the source's initial
// state built, and each time the hub or the remote view is synced): the heap's free memory goes back to the system
// (a collection), and the executable's pages leave the resident set, to
// come back as they are used (shared/execpages). A spoke allocates most
// at start, and its start runs code it never runs again; without this it
// would keep both resident (docs/decisions/053-spoke-settles-after-start.md).
func settle(log *slog.Logger) {
	debug.FreeOSMemory()
	if n, err := execpages.Release(); err != nil {
		log.Warn("executable pages not released", "err", err)
	} else {
		log.Debug("settled: free heap and executable pages released", "executableBytes", n)
	}
}
