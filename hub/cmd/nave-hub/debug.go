package main

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/shared/admin"
	"github.com/navemesh/nave/xds/ads"
	"github.com/navemesh/nave/xds/cache"
	"github.com/navemesh/nave/xds/mesh"
)

func registerDebug(adm *admin.Server, in *ingest.Server, resources *cache.Cache, xds *ads.Server) {
	adm.HandleDebug("spokes", "connected and stale clusters: stream, sync state, resources, rejected resources", func(*http.Request) (any, error) {
		return in.Status(), nil
	})
	adm.HandleDebug("syncz", "connected proxies: per type the subscribed, sent, ACKed and NACKed versions", func(*http.Request) (any, error) {
		return xds.Status(), nil
	})
	adm.HandleDebug("config", "what the hub would send one connected proxy (?proxy=ID|NODE[&type=Cluster,Listener,...]): its resources as protojson; secrets without private keys", func(r *http.Request) (any, error) {
		q := r.URL.Query()
		if q.Get("proxy") == "" {
			return nil, fmt.Errorf("name a proxy: ?proxy=ID, a connection ID or node ID from /debug/syncz")
		}
		var types []string
		if t := q.Get("type"); t != "" {
			types = strings.Split(t, ",")
		}
		return xds.ProxyConfig(q.Get("proxy"), types...)
	})
	adm.HandleDebug("meshes", "each mesh's current push context: version, clusters, conflicts and config problems", func(*http.Request) (any, error) {
		type meshView struct {
			Mesh      string              `json:"mesh"`
			Version   uint64              `json:"version"`
			BuiltAt   string              `json:"builtAt"`
			Clusters  []mesh.ClusterState `json:"clusters"`
			Services  int                 `json:"services"`
			Resources map[string]int      `json:"resources"`
			Conflicts []mesh.Conflict     `json:"conflicts"`
			Problems  []mesh.Problem      `json:"problems"`
		}
		out := []meshView{}
		for _, e := range resources.Entries() {
			st := e.State
			v := meshView{Mesh: st.Mesh, Version: st.Version, BuiltAt: st.BuiltAt.UTC().Format("2006-01-02T15:04:05.000Z"),
				Clusters: st.Snapshot.Clusters, Services: len(st.Snapshot.Services), Resources: map[string]int{},
				Conflicts: append([]mesh.Conflict{}, st.Snapshot.Conflicts...), Problems: e.AllProblems()}
			for t, rs := range e.Proxyless().Resources {
				v.Resources[t] = len(rs)
			}
			out = append(out, v)
		}
		return out, nil
	})
	adm.HandleDebug("services", "services and endpoints of a mesh (?mesh=NAME, default: every mesh), with cluster, locality and stale marks", func(r *http.Request) (any, error) {
		want := r.URL.Query().Get("mesh")
		out := map[string][]*mesh.Service{}
		for _, e := range resources.Entries() {
			st := e.State
			if want != "" && st.Mesh != want {
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
	})
}
