package gen

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Filter names, as Envoy and grpc-go know them.
const (
	FaultFilter  = "envoy.filters.http.fault"
	CorsFilter   = "envoy.filters.http.cors"
	RouterFilter = "envoy.filters.http.router"
)

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err) // only for messages of linked types, which always marshal
	}
	return a
}

func adsSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		ResourceApiVersion:    corev3.ApiVersion_V3,
	}
}

// apiListener is a client-side listener for grpc-go: an HTTP connection
// manager whose routes come over ADS under the listener's own name. The
// fault filter is always present (empty) so routes can enable it per route;
// the router must be last.
func apiListener(name string) *listenerv3.Listener {
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: name,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    adsSource(),
			RouteConfigName: name,
		}},
		HttpFilters: []*hcmv3.HttpFilter{
			{Name: FaultFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&faultv3.HTTPFault{})}},
			{Name: RouterFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})}},
		},
	}
	return &listenerv3.Listener{
		Name:        name,
		ApiListener: &listenerv3.ApiListener{ApiListener: mustAny(hcm)},
	}
}
