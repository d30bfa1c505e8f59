// Command nave-spoke is the per-cluster control plane: it watches its
// cluster's config and pushes it to the hub over a stream it dials.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"golang.org/x/sync/errgroup"

	"github.com/navemesh/nave/shared/admin"
	"github.com/navemesh/nave/shared/logging"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/program"
	"github.com/navemesh/nave/spoke/spokeconfig"
	"github.com/navemesh/nave/spoke/uplink"
)

func main() {
	program.Main(spokeconfig.Program, func(c *spokeconfig.Config) logging.Config { return c.Log }, serve)
}

func serve(ctx context.Context, cfg spokeconfig.Config, log *slog.Logger) error {
	lis, err := net.Listen("tcp", cfg.Admin.Listen)
	if err != nil {
		return fmt.Errorf("admin.listen: %w", err)
	}
	reg := admin.NewRegistry()
	adm := admin.New(log, reg)

	src, err := newSource(cfg, log, reg, adm)
	if err != nil {
		lis.Close()
		return err
	}
	up := uplink.New(uplink.Options{
		Address: cfg.Hub.Address, Mesh: cfg.Mesh, Cluster: cfg.Cluster,
		BackoffInitial: cfg.Hub.BackoffInitial, BackoffMax: cfg.Hub.BackoffMax, MaxMessageBytes: cfg.Hub.MaxMessageBytes,
		Logger: log.With("component", "uplink"), Registerer: reg,
	})

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
	adm.HandleDebug("uplink", "the hub stream: state, last error, resources ACKed, resources the hub NACKed and why", func(*http.Request) (any, error) {
		return up.Status(), nil
	})

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return adm.Serve(gctx, lis) })
	g.Go(func() error { return src.Run(gctx, func(objs []*meshconfig.Object) { up.Update(objs) }) })
	g.Go(func() error { return up.Run(gctx) })
	log.Info("spoke running", "source", cfg.Source, "mesh", cfg.Mesh, "cluster", cfg.Cluster, "hub", cfg.Hub.Address, "admin", cfg.Admin.Listen)
	return g.Wait()
}
