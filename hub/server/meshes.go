package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/hub/hubconfig"
	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/hub/tenants"
	"github.com/navemesh/nave/hub/watch"
	"github.com/navemesh/nave/shared/admin"
	"github.com/navemesh/nave/shared/meshlimits"
	"github.com/navemesh/nave/xds/engine"
)

// openMeshes opens the meshes this hub serves, the one place they come
// from: with TLS, the tenants Service on the hub's state store (seeded
// from ca.meshes on first start; Run keeps its Registry current and
// purges deleted meshes); in plaintext mode, which keeps no state, a
// Registry holding ca.meshes for the hub's life (svc is nil).
func openMeshes(ctx context.Context, cfg hubconfig.Config, log *slog.Logger) (svc *tenants.Service, reg *tenants.Registry, err error) {
	if cfg.TLS.Plaintext {
		return nil, seedRegistry(cfg), nil
	}
	var seeds []tenants.Seed
	for _, m := range cfg.CA.ParsedMeshes() {
		seeds = append(seeds, tenants.Seed{Name: m.Name, TrustDomain: m.TrustDomain})
	}
	st := cfg.State
	// The meshes' limits default to the hub's (limits.*).
	svc, err = tenants.Open(ctx, st.Store, st.Dir, st.Namespace, st.Kubeconfig, tenants.Options{Seeds: seeds, Replica: cfg.Replicas.ID,
		Defaults: hubLimits(cfg), Logger: log.With("component", "tenants")})
	if err != nil {
		return nil, nil, fmt.Errorf("state.store: meshes: %w", err)
	}
	return svc, svc.Registry(), nil
}

// seedRegistry returns a registry holding ca.meshes (Active, with the
// hub's limits), which nothing changes: the meshes of a plaintext hub.
func seedRegistry(cfg hubconfig.Config) *tenants.Registry {
	reg := tenants.NewRegistry()
	var meshes []*tenants.Mesh
	for _, m := range cfg.CA.ParsedMeshes() {
		meshes = append(meshes, &tenants.Mesh{Name: m.Name, UID: "ca.meshes/" + m.Name, Generation: 1,
			TrustDomain: m.TrustDomain, Config: &meshv1alpha1.MeshConfig{}, Limits: hubLimits(cfg), Phase: tenants.Active})
	}
	reg.Replace(meshes)
	return reg
}

// meshConfigOf reads a mesh's MeshConfig from reg, for the engine
// (pushctx.Options.MeshConfig): nil for a mesh it does not hold. A new
// generation of a mesh is notified to the engine by meshLife.start.
func meshConfigOf(reg *tenants.Registry) func(string) *meshv1alpha1.MeshConfig {
	return func(mesh string) *meshv1alpha1.MeshConfig {
		if m, ok := reg.Get(mesh); ok {
			return m.Config
		}
		return nil
	}
}

// meshNetworksOf reads a mesh's MeshNetworks from reg, for the engine
// (pushctx.Options.MeshNetworks) and Watch: nil for a mesh it does not
// hold or one without networks. Like MeshConfig, a new generation is
// notified by meshLife.start.
func meshNetworksOf(reg *tenants.Registry) func(string) *meshv1alpha1.MeshNetworks {
	return func(mesh string) *meshv1alpha1.MeshNetworks {
		if m, ok := reg.Get(mesh); ok && len(m.Networks.GetNetworks()) > 0 {
			return m.Networks
		}
		return nil
	}
}

// meshLife serves the registry's meshes as they come and go on this
// replica: a mesh that turns Active gets its CA (and is enrollable at
// once); one that is no longer served (Deleting, removed, or re-created
// as another incarnation) loses its spokes' streams and resources, its
// Watch and proxy streams and its CA. Every replica does this on its own
// registry, so a change reaches the replica set without a call between
// replicas. Its methods are safe for concurrent use.
type meshLife struct {
	reg   *tenants.Registry
	sec   *security
	store *ingest.Store
	w     *watch.Server
	eng   *engine.Engine
	// gwStatuses remembers each mesh's last Gateway API statuses.
	gwStatuses *gatewayAPIStatuses
	// limits holds the per-mesh limit series, dropped with the mesh.
	limits *meshlimits.Metrics
	log    *slog.Logger
}

// changed is the registry's subscriber (Registry.Subscribe).
func (l *meshLife) changed(name string, old, cur *tenants.Mesh) {
	if old != nil {
		switch {
		case cur == nil:
			l.stop(name, fmt.Sprintf("mesh %s was deleted", name))
		case cur.UID != old.UID:
			l.stop(name, fmt.Sprintf("mesh %s was deleted and created anew", name))
		case cur.Phase != tenants.Active:
			l.stop(name, fmt.Sprintf("mesh %s is being deleted", name))
		}
	}
	if cur != nil && cur.Phase == tenants.Active {
		l.start(cur)
	}
}

// start makes m servable: its CA loaded (a mesh already loaded stays as
// it is), and its push context and Watch views built again (a new
// MeshConfig, a new trust bundle). A CA that does not load is logged; the
// next reconcile tries again.
func (l *meshLife) start(m *tenants.Mesh) {
	if !l.sec.plaintext {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := l.sec.authority.Load(ctx, ca.Mesh{Name: m.Name, TrustDomain: m.TrustDomain})
		cancel()
		if err != nil {
			l.log.Error("mesh CA not loaded: the mesh is not enrollable until it is", "mesh", m.Name, "uid", m.UID, "err", err)
			return
		}
	}
	l.log.Info("mesh served", "mesh", m.Name, "uid", m.UID, "generation", m.Generation, "trustDomain", m.TrustDomain)
	l.eng.Notify(m.Name)
	l.w.MeshConfigChanged(m.Name) // and its trust bundle and networks
}

// stop cuts mesh off on this replica, telling everyone cut off why: its
// spokes' Push and Watch streams closed and their resources withdrawn,
// its proxies' streams closed, what the engine keeps of it dropped (a
// re-created mesh is built from scratch), its CA forgotten (its certificates name an
// unknown mesh from then on). Hosted already answers false for it (or,
// for a new incarnation, the new one's CA replaces the forgotten one), so
// nothing of it reconnects.
func (l *meshLife) stop(mesh, reason string) {
	spokes := l.store.WithdrawMesh(mesh, reason)
	watches := l.w.CloseMesh(mesh, reason)
	proxies := l.eng.ADS().CloseMesh(mesh, reason)
	l.eng.Forget(mesh) // its push context, goroutine, cache and metric series
	l.gwStatuses.forget(mesh)
	l.limits.ForgetMesh(mesh)
	if !l.sec.plaintext {
		l.sec.authority.Forget(mesh)
	}
	l.log.Warn("mesh no longer served", "mesh", mesh, "reason", reason, "spokes", len(spokes), "watches", watches, "proxies", proxies)
}

// reconcile loads the CA of every hosted mesh that has none (a Load that
// failed) and forgets those of meshes no longer hosted.
func (l *meshLife) reconcile() {
	if l.sec.plaintext {
		return
	}
	for _, m := range l.reg.List() {
		if m.Phase != tenants.Active {
			continue
		}
		if _, err := l.sec.authority.TrustDomain(m.Name); err != nil {
			l.start(m)
		}
	}
	for _, m := range l.sec.authority.Meshes() {
		if !l.reg.Hosted(m.Name) {
			l.sec.authority.Forget(m.Name)
		}
	}
}

// reconcileEvery calls reconcile every interval until ctx ends.
func (l *meshLife) reconcileEvery(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			l.reconcile()
		}
	}
}

// connectedSpokes counts the clusters of mesh connected to the replica
// set, as this replica sees them (its own spokes and those relayed).
func connectedSpokes(store *ingest.Store, mesh string) int {
	n := 0
	for _, c := range store.Status() {
		if c.Mesh == mesh && c.Connected {
			n++
		}
	}
	return n
}

// meshStatus is one mesh of /debug/meshes: the registry's record, the
// spokes connected, and its current push context once one is built.
type meshStatus struct {
	Mesh            string        `json:"mesh"`
	UID             string        `json:"uid"`
	Generation      int64         `json:"generation"`
	TrustDomain     string        `json:"trustDomain"`
	Phase           tenants.Phase `json:"phase"`
	ConnectedSpokes int           `json:"connectedSpokes"`
	*engine.MeshView
}

// meshesView is /debug/meshes: every mesh of the registry visible to the
// operator asking, with its push context if it has one. A push context of
// a mesh the registry no longer holds is not shown.
func meshesView(reg *tenants.Registry, store *ingest.Store, eng *engine.Engine, r *http.Request) []meshStatus {
	visible := func(mesh string) bool { return admin.Visible(r, mesh) }
	built := map[string]*engine.MeshView{}
	views := eng.Meshes(visible)
	for i := range views {
		built[views[i].Mesh] = &views[i]
	}
	out := []meshStatus{}
	for _, m := range reg.List() {
		if !visible(m.Name) {
			continue
		}
		out = append(out, meshStatus{Mesh: m.Name, UID: m.UID, Generation: m.Generation, TrustDomain: m.TrustDomain, Phase: m.Phase,
			ConnectedSpokes: connectedSpokes(store, m.Name), MeshView: built[m.Name]})
	}
	return out
}
