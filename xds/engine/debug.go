package engine

import (
	"fmt"

	"github.com/navemesh/nave/xds/mesh"
)

// MeshView is one mesh's current push context as the debug views show it.
type MeshView struct {
	Mesh      string              `json:"mesh"`
	Version   uint64              `json:"version"`
	BuiltAt   string              `json:"builtAt"`
	Clusters  []mesh.ClusterState `json:"clusters"`
	Services  int                 `json:"services"`
	Resources map[string]int      `json:"resources"`
	Conflicts []mesh.Conflict     `json:"conflicts"`
	Problems  []mesh.Problem      `json:"problems"`
	// Networks are the mesh's networks with their gateways and the
	// endpoints other networks cannot reach (mesh.Snapshot.Networks).
	Networks []mesh.NetworkStatus `json:"networks,omitempty"`
}

// Meshes returns the current push context of every ready mesh that
// visible accepts, sorted by mesh: version, clusters, conflicts, the
// build's and generation's problems, the proxyless resources by type, and
// the networks.
func (e *Engine) Meshes(visible func(mesh string) bool) []MeshView {
	out := []MeshView{}
	for _, en := range e.cache.Entries() {
		st := en.State
		if !visible(st.Mesh) {
			continue
		}
		v := MeshView{Mesh: st.Mesh, Version: st.Version, BuiltAt: st.BuiltAt.UTC().Format("2006-01-02T15:04:05.000Z"),
			Clusters: st.Snapshot.Clusters, Services: len(st.Snapshot.Services), Resources: map[string]int{},
			Conflicts: append([]mesh.Conflict{}, st.Snapshot.Conflicts...), Problems: en.AllProblems(), Networks: st.Snapshot.Networks()}
		for t, rs := range en.Proxyless().Resources {
			v.Resources[t] = len(rs)
		}
		out = append(out, v)
	}
	return out
}

// Services returns the services and endpoints of the current push context
// of want (every ready mesh if empty) that visible accepts, by mesh and in
// hostname order; an error if want has none.
func (e *Engine) Services(want string, visible func(mesh string) bool) (map[string][]*mesh.Service, error) {
	out := map[string][]*mesh.Service{}
	for _, en := range e.cache.Entries() {
		st := en.State
		if (want != "" && st.Mesh != want) || !visible(st.Mesh) {
			continue
		}
		for _, h := range st.Snapshot.Hostnames() {
			out[st.Mesh] = append(out[st.Mesh], st.Snapshot.Services[h])
		}
	}
	if want != "" && out[want] == nil {
		return nil, fmt.Errorf("mesh %q has no push context", want)
	}
	return out, nil
}
