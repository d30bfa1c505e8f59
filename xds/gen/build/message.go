package build

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Any packs m. It panics if m does not marshal, which a message of a
// linked type always does.
func Any(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err) // only for messages of linked types, which always marshal
	}
	return a
}

// ADSConfigSource is a config source that says "over the ADS stream this
// config came on", for RDS, EDS and SDS references.
func ADSConfigSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		ResourceApiVersion:    corev3.ApiVersion_V3,
	}
}

// SDSConfigSource is where a proxy gets its workload secrets: the
// bootstrap cluster named cluster (a local agent, gRPC SotW SDS), or the
// hub over ADS when cluster is empty.
func SDSConfigSource(cluster string) *corev3.ConfigSource {
	if cluster == "" {
		return ADSConfigSource()
	}
	return &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_ApiConfigSource{ApiConfigSource: &corev3.ApiConfigSource{
			ApiType: corev3.ApiConfigSource_GRPC, TransportApiVersion: corev3.ApiVersion_V3,
			GrpcServices: []*corev3.GrpcService{{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
				EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: cluster}}}},
		}},
		ResourceApiVersion: corev3.ApiVersion_V3,
	}
}

// SocketAddress is address:port as an Envoy address.
func SocketAddress(address string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address:       address,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}

// HCMFilter is hcm as a listener's network filter.
func HCMFilter(hcm *hcmv3.HttpConnectionManager) *listenerv3.Filter {
	return &listenerv3.Filter{Name: HTTPConnectionManagerFilter, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: Any(hcm)}}
}

// Duration copies d (nil stays nil), so that generated messages never
// share the config's own.
func Duration(d *durationpb.Duration) *durationpb.Duration {
	if d == nil {
		return nil
	}
	return durationpb.New(d.AsDuration())
}
