// Package tenants holds the meshes (tenants) a hub serves as objects it
// manages while it runs: each mesh's record (name, incarnation, trust
// domain, Istio MeshConfig and MeshNetworks, limits, phase), kept in the hub's state store
// so that every replica agrees, and the Registry every part of the hub
// reads them from. ca.meshes seeds the store on first start.
package tenants

import (
	"slices"
	"sync"
	"time"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
)

// Phase is where a mesh is in its life.
type Phase string

// Phases. A Deleting mesh is served by no replica: its spokes and proxies
// are disconnected and its tokens and certificates refused, while its
// state is purged; then its record goes.
const (
	Active   Phase = "Active"
	Deleting Phase = "Deleting"
)

// Limits bound what one mesh may make the hub do, so that one tenant
// cannot slow another. Zero means the hub's default.
type Limits struct {
	// ObjectsPerKind bounds the config objects of one kind in one mesh
	// (all clusters together).
	ObjectsPerKind int `json:"objectsPerKind,omitempty"`
	// Proxies bounds the xDS streams of the mesh across the replica set
	// as one replica sees them.
	Proxies int `json:"proxies,omitempty"`
	// Spokes bounds the clusters of the mesh.
	Spokes int `json:"spokes,omitempty"`
	// PushesPerSecond bounds the mesh's push-context builds per second.
	PushesPerSecond float64 `json:"pushesPerSecond,omitempty"`
}

// Mesh is one tenant as the hub keeps it. A Mesh value is immutable once
// published by the Registry: readers share it and never modify it.
type Mesh struct {
	Name string `json:"name"`
	// UID names this incarnation of the mesh: a mesh re-created with a
	// deleted mesh's name has another, and inherits nothing.
	UID string `json:"uid"`
	// Generation counts the updates of this incarnation's spec.
	Generation int64     `json:"generation"`
	Created    time.Time `json:"created"`
	// TrustDomain is the mesh's SPIFFE trust domain; two meshes never
	// share one.
	TrustDomain string `json:"trustDomain"`
	// Config is the mesh's Istio MeshConfig (never nil once published:
	// an empty one means Istio's defaults).
	Config *meshv1alpha1.MeshConfig `json:"-"`
	// Networks is the mesh's Istio MeshNetworks (nil or empty: none
	// configured; docs/multi-network.md).
	Networks *meshv1alpha1.MeshNetworks `json:"-"`
	Limits   Limits                     `json:"limits"`
	Phase    Phase                      `json:"phase"`
	// KeepCA, on a Deleting mesh, keeps its CA in the store.
	KeepCA bool `json:"keepCA,omitempty"`
}

// Registry is the set of meshes this replica knows, as last read from the
// store. It is safe for concurrent use; subscribers are called without
// the lock held, in order, on the goroutine that applied the change.
type Registry struct {
	mu     sync.Mutex
	meshes map[string]*Mesh
	subs   []func(name string, old, cur *Mesh)
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry { return &Registry{meshes: map[string]*Mesh{}} }

// Get returns the mesh called name, Active or Deleting.
func (r *Registry) Get(name string) (*Mesh, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.meshes[name]
	return m, ok
}

// Hosted reports whether the hub serves mesh name now: it exists and is
// Active. Every authenticator asks this, on every stream.
func (r *Registry) Hosted(name string) bool {
	m, ok := r.Get(name)
	return ok && m.Phase == Active
}

// List returns every mesh, by name.
func (r *Registry) List() []*Mesh {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Mesh, 0, len(r.meshes))
	for _, m := range r.meshes {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b *Mesh) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// Names returns the names of the Active meshes, sorted.
func (r *Registry) Names() []string {
	var out []string
	for _, m := range r.List() {
		if m.Phase == Active {
			out = append(out, m.Name)
		}
	}
	return out
}

// Subscribe calls fn after every change of a mesh: old is nil for a new
// mesh, cur nil for a removed one.
func (r *Registry) Subscribe(fn func(name string, old, cur *Mesh)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.subs = append(r.subs, fn)
}

// Replace makes meshes the registry's content (what the store holds now)
// and tells subscribers what changed: a mesh whose UID, Generation or
// Phase differs from the one held counts as changed.
func (r *Registry) Replace(meshes []*Mesh) {
	r.mu.Lock()
	next := make(map[string]*Mesh, len(meshes))
	type change struct{ old, cur *Mesh }
	changes := map[string]change{}
	for _, m := range meshes {
		next[m.Name] = m
		if old, ok := r.meshes[m.Name]; !ok || old.UID != m.UID || old.Generation != m.Generation || old.Phase != m.Phase {
			changes[m.Name] = change{old: r.meshes[m.Name], cur: m}
		}
	}
	for name, old := range r.meshes {
		if _, ok := next[name]; !ok {
			changes[name] = change{old: old}
		}
	}
	r.meshes = next
	subs := slices.Clone(r.subs)
	r.mu.Unlock()
	names := make([]string, 0, len(changes))
	for n := range changes {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		for _, fn := range subs {
			fn(n, changes[n].old, changes[n].cur)
		}
	}
}
