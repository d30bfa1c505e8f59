package proxyless

import (
	"fmt"
	"slices"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/navemesh/nave/xds/gatewayapi"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/routes"
	"github.com/navemesh/nave/xds/mesh"
)

// routeConfig builds the routes of one listener (service port). Without a
// VirtualService every request goes to the port's cluster.
func (g *generator) routeConfig(svc *mesh.Service, p mesh.Port, name string) *routev3.RouteConfiguration {
	vh := &routev3.VirtualHost{
		Name:    name,
		Domains: []string{name, svc.Hostname},
	}
	if g.routes == nil {
		g.routes = routes.ForProxyless(g.snap, &g.problems)
	}
	vss := meshRoutes(g.snap.VirtualServices[svc.Hostname])
	for _, other := range vss[min(1, len(vss)):] {
		g.problems.Add(mesh.Problem{Resource: other.Ref(), Field: "spec.hosts",
			Reason: fmt.Sprintf("host %s is already routed by %s; this VirtualService is ignored for it", svc.Hostname, vss[0].Ref())})
	}
	if len(vss) > 0 {
		vh.Routes = g.httpRoutes(vss[0], svc, p)
	} else {
		vh.Routes = []*routev3.Route{{
			Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: build.ClusterName(svc.Hostname, p.Number, "")},
				HashPolicy: g.routes.HashPolicy(svc.Hostname, p.Number, "")}},
		}}
	}
	return &routev3.RouteConfiguration{Name: name, VirtualHosts: []*routev3.VirtualHost{vh}}
}

func (g *generator) httpRoutes(cfg *mesh.Config, svc *mesh.Service, p mesh.Port) []*routev3.Route {
	return g.routes.VirtualService(cfg, routes.Mesh(p.Number))
}

// meshRoutes leaves out the VirtualServices translated from Gateway API
// consumer routes (exported to their own namespace only): proxyless
// clients share one configuration mesh-wide, so a route for the clients
// of one namespace cannot apply to them (docs/gateway-api.md).
func meshRoutes(vss []*mesh.Config) []*mesh.Config {
	for i, c := range vss {
		if c.Object.Annotations[gatewayapi.SourceAnnotation] != "" && slices.Equal(c.VirtualService().GetExportTo(), []string{"."}) {
			out := slices.Clone(vss[:i])
			for _, c := range vss[i+1:] {
				if c.Object.Annotations[gatewayapi.SourceAnnotation] == "" || !slices.Equal(c.VirtualService().GetExportTo(), []string{"."}) {
					out = append(out, c)
				}
			}
			return out
		}
	}
	return vss
}
