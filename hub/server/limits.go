package server

import (
	"github.com/navemesh/nave/hub/hubconfig"
	"github.com/navemesh/nave/hub/tenants"
)

// hubLimits are the hub's default limits (config section limits), which
// a mesh's record fills its unset limits from (tenants.Options.Defaults).
func hubLimits(cfg hubconfig.Config) tenants.Limits {
	return tenants.Limits{ObjectsPerKind: cfg.Limits.ObjectsPerKind, Proxies: cfg.Limits.Proxies, Spokes: cfg.Limits.Spokes,
		PushesPerSecond: cfg.Limits.PushesPerSecond}
}

// meshLimits gives each mesh's limits in force: its record's in the
// registry, whose unset ones the registry already filled from the hub's
// defaults; the defaults for a mesh it does not hold. It feeds ingest
// (objects, spokes), the ADS server (proxies) and the push contexts
// (builds per second) through funcs of plain values. Safe for concurrent
// use: it only reads the registry, itself safe.
type meshLimits struct {
	defaults tenants.Limits
	registry *tenants.Registry
}

// of returns mesh's limits in force.
func (l meshLimits) of(mesh string) tenants.Limits {
	if m, ok := l.registry.Get(mesh); ok {
		return m.Limits
	}
	return l.defaults
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
