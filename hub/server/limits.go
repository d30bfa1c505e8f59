package server

import (
	"github.com/navemesh/nave/hub/hubconfig"
	"github.com/navemesh/nave/hub/tenants"
	"github.com/navemesh/nave/shared/meshlimits"
)

// meshLimits gives each mesh's limits: what its record in the registry
// sets, the hub's defaults (config section limits) for the rest. It
// feeds ingest (objects, spokes), the ADS server (proxies) and the push
// contexts (builds per second) through funcs of plain values. Safe for
// concurrent use: it only reads the registry, itself safe.
type meshLimits struct {
	defaults hubconfig.Limits
	// registry holds the meshes' own limits; nil: every mesh has the
	// defaults.
	registry *tenants.Registry
}

// of returns mesh's limits, each zero of its record filled from the
// defaults.
func (l meshLimits) of(mesh string) tenants.Limits {
	var own tenants.Limits
	if l.registry != nil {
		if m, ok := l.registry.Get(mesh); ok {
			own = m.Limits
		}
	}
	or := func(v, d int) int {
		if v > 0 {
			return v
		}
		return d
	}
	out := tenants.Limits{
		ObjectsPerKind:  or(own.ObjectsPerKind, l.defaults.ObjectsPerKind),
		Proxies:         or(own.Proxies, l.defaults.Proxies),
		Spokes:          or(own.Spokes, l.defaults.Spokes),
		PushesPerSecond: own.PushesPerSecond,
	}
	if out.PushesPerSecond <= 0 {
		out.PushesPerSecond = l.defaults.PushesPerSecond
	}
	return out
}

// ingest is ingest.ServerOptions.Limits.
func (l meshLimits) ingest(mesh string) (objectsPerKind, spokes int) {
	m := l.of(mesh)
	return m.ObjectsPerKind, m.Spokes
}

// proxies is ads.Options.MaxProxies.
func (l meshLimits) proxies(mesh string) int { return l.of(mesh).Proxies }

// pushesPerSecond is pushctx.Options.PushesPerSecond.
func (l meshLimits) pushesPerSecond(mesh string) float64 { return l.of(mesh).PushesPerSecond }

// MeshLimits returns mesh's limits in force (its own, else the hub's
// defaults) and what it uses of them on this replica, with their
// refusals: what navectl mesh get shows beside the mesh.
func (s *Server) MeshLimits(mesh string) (tenants.Limits, meshlimits.Usage) {
	return s.limits.of(mesh), s.limitMetrics.Of(mesh)
}
