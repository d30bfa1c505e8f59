package proxyless

import (
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/navemesh/nave/xds/gen/build"
)

// apiListener is a client-side listener for grpc-go: an HTTP connection
// manager whose routes come over ADS under the listener's own name. The
// fault filter is always present (empty) so routes can enable it per route;
// the router must be last.
func apiListener(name string) *listenerv3.Listener {
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: name,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    build.ADSConfigSource(),
			RouteConfigName: name,
		}},
		HttpFilters: []*hcmv3.HttpFilter{
			{Name: build.FaultFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: build.Any(&faultv3.HTTPFault{})}},
			{Name: build.RouterFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: build.Any(&routerv3.Router{})}},
		},
	}
	return &listenerv3.Listener{
		Name:        name,
		ApiListener: &listenerv3.ApiListener{ApiListener: build.Any(hcm)},
	}
}
