// Command nave-spoke is the per-cluster control plane: it watches its
// cluster's config and pushes it to the hub over a stream it dials, proving
// which (mesh, cluster) it is with a certificate it gets by enrolling (see
// docs/enrollment.md). With the kubernetes source it can also serve the
// cluster's validation webhook (webhook.listen, docs/webhooks.md) and
// sidecar injector (inject.enabled, docs/injection.md).
package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"golang.org/x/sync/errgroup"

	"github.com/navemesh/nave/shared/admin"
	"github.com/navemesh/nave/shared/logging"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/program"
	"github.com/navemesh/nave/spoke/remote"
	"github.com/navemesh/nave/spoke/spokeconfig"
	"github.com/navemesh/nave/spoke/uplink"
)

func main() {
	program.Main(spokeconfig.Program, func(c *spokeconfig.Config) logging.Config { return c.Log }, serve)
}

// serve runs the spoke until ctx ends. The admin server starts first, so
// that metrics and debug views are served while the spoke waits for the
// hub to enroll it; the uplink and the source start once it has its
// identity (readiness fails until then).
func serve(ctx context.Context, cfg spokeconfig.Config, log *slog.Logger) error {
	lis, err := net.Listen("tcp", cfg.Admin.Listen)
	if err != nil {
		return fmt.Errorf("admin.listen: %w", err)
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
			return fmt.Errorf("ra.listen: %w", err)
		}
	}
	if cfg.Fallback.Enabled {
		if fbLis, err = net.Listen("tcp", cfg.Fallback.Listen); err != nil {
			closeAll()
			return fmt.Errorf("fallback.listen: %w", err)
		}
	}
	polled := cfg.Hub.Mode == spokeconfig.ModePolled
	if polled {
		if pollLis, err = net.Listen("tcp", cfg.Hub.PollListen); err != nil {
			closeAll()
			return fmt.Errorf("hub.pollListen: %w", err)
		}
	}
	id := newHubIdentity(cfg, log.With("component", "identity"), reg)
	var wh *webhook
	if cfg.Webhook.Listen != "" { // validated: only with the kubernetes source
		if whLis, err = net.Listen("tcp", cfg.Webhook.Listen); err != nil {
			closeAll()
			return fmt.Errorf("webhook.listen: %w", err)
		}
		if wh, err = newWebhook(cfg, whLis, adm, log.With("component", "webhook"), reg, id.trust); err != nil {
			closeAll()
			return err
		}
	}
	src, err := newSource(cfg, log, reg, adm)
	if err != nil {
		closeAll()
		return err
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

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return adm.Serve(gctx, lis) })
	publish := func(objs []*meshconfig.Object) {}
	if wh != nil {
		g.Go(func() error { return wh.run(gctx) })
		publish = wh.validator.Update
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
		var view *remote.View
		var viewFile string
		if fbLis != nil {
			view, viewFile = remoteView(cfg, log.With("component", "remote"), adm)
		}
		upOpts := uplink.Options{
			Address: cfg.Hub.Address, Mesh: cfg.Mesh, Cluster: cfg.Cluster, DomainSuffix: cfg.DomainSuffix, TLS: hubTLS,
			BackoffInitial: cfg.Hub.BackoffInitial, BackoffMax: cfg.Hub.BackoffMax, MaxMessageBytes: cfg.Hub.MaxMessageBytes,
			View: view, ViewFile: viewFile,
			Logger: log.With("component", "uplink"), Registerer: reg,
		}
		if polled {
			// The hub dials in, Poll and (with a view) PollWatch.
			upOpts.Polled, upOpts.Address = true, cfg.Hub.PollListen
		}
		up := uplink.New(upOpts)
		update := up.Update
		if fbLis != nil {
			fb := newFallback(cfg, view, up.Synced, renewer, log.With("component", "fallback"), reg, adm)
			g.Go(func() error { return fb.Run(gctx) })
			g.Go(func() error { return runFallback(gctx, fb, fbLis, renewer) })
			update = func(objs []*meshconfig.Object) {
				up.Update(objs)
				fb.Update(objs)
			}
		}
		adm.HandleDebug("uplink", "the hub stream: mode (push, or polled and by which hub), state, last error, resources ACKed, resources the hub NACKed and why", func(*http.Request) (any, error) {
			return up.Status(), nil
		})
		g.Go(func() error {
			return src.Run(gctx, func(objs []*meshconfig.Object) {
				update(objs)
				publish(objs)
			})
		})
		log.Info("spoke running", "source", cfg.Source, "mesh", cfg.Mesh, "cluster", cfg.Cluster, "hub", cfg.Hub.Address,
			"mode", cfg.Hub.Mode, "tls", hubTLS != nil, "admin", cfg.Admin.Listen)
		if polled {
			log.Info("polled mode: waiting for the hub to dial", "pollListen", pollLis.Addr().String())
			return runPolled(gctx, up, pollLis, renewer)
		}
		return up.Run(gctx)
	})
	return g.Wait()
}
