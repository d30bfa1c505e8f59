package server

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/hub/statuspage"
	"github.com/navemesh/nave/hub/tenants"
	"github.com/navemesh/nave/shared/admin"
	"github.com/navemesh/nave/xds/ads"
	"github.com/navemesh/nave/xds/engine"
)

func registerDebug(adm *admin.Server, meshes *tenants.Registry, in *ingest.Store, eng *engine.Engine) {
	xds := eng.ADS()
	// The status page reads the tenant views below in the browser: it shows
	// each operator what those views show it.
	adm.HandlePage(statuspage.Path, statuspage.Handler())
	// Every view but security is a tenant view: it shows an operator of a
	// tenant (admin.operatorListen) only its own mesh's data.
	adm.HandleTenantDebug("spokes", "connected and stale clusters: stream, sync state, resources, rejected resources", func(r *http.Request) (any, error) {
		out := []ingest.ClusterStatus{}
		for _, c := range in.Status() {
			if admin.Visible(r, c.Mesh) {
				out = append(out, c)
			}
		}
		return out, nil
	})
	adm.HandleTenantDebug("syncz", "connected proxies: per type the subscribed, sent, ACKed and NACKed versions", func(r *http.Request) (any, error) {
		out := []ads.ConnStatus{}
		for _, c := range xds.Status() {
			if admin.Visible(r, c.Mesh) {
				out = append(out, c)
			}
		}
		return out, nil
	})
	adm.HandleTenantDebug("config", "what the hub would send one connected proxy (?proxy=ID|NODE[&type=Cluster,Listener,...]): its resources as protojson; secrets without private keys", func(r *http.Request) (any, error) {
		q := r.URL.Query()
		if q.Get("proxy") == "" {
			return nil, fmt.Errorf("name a proxy: ?proxy=ID, a connection ID or node ID from /debug/syncz")
		}
		var types []string
		if t := q.Get("type"); t != "" {
			types = strings.Split(t, ",")
		}
		// Another mesh's proxies are not there for a tenant's operator.
		return xds.ProxyConfig(q.Get("proxy"), func(mesh string) bool { return admin.Visible(r, mesh) }, types...)
	})
	adm.HandleTenantDebug("meshes", "each mesh the hub knows: its record (incarnation, trust domain, phase), connected spokes, and its current push context: version, clusters, conflicts and config problems", func(r *http.Request) (any, error) {
		return meshesView(meshes, in, eng, r), nil
	})
	adm.HandleTenantDebug("services", "services and endpoints of a mesh (?mesh=NAME, default: every mesh), with cluster, locality and stale marks", func(r *http.Request) (any, error) {
		return eng.Services(r.URL.Query().Get("mesh"), func(mesh string) bool { return admin.Visible(r, mesh) })
	})
}
