package routes

import (
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/xds/gen/build"
)

func hashEqual(a, b []*routev3.RouteAction_HashPolicy) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// consistentHash translates a DestinationRule's consistentHash into route
// hash policies (Envoy RouteAction.hash_policy); nil when none applies.
func consistentHash(ch *networking.LoadBalancerSettings_ConsistentHashLB) []*routev3.RouteAction_HashPolicy {
	var p *routev3.RouteAction_HashPolicy
	switch k := ch.GetHashKey().(type) {
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName:
		p = &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_Header_{Header: &routev3.RouteAction_HashPolicy_Header{HeaderName: k.HttpHeaderName}}}
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpCookie:
		p = &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_Cookie_{Cookie: &routev3.RouteAction_HashPolicy_Cookie{
			Name: k.HttpCookie.GetName(), Path: k.HttpCookie.GetPath(), Ttl: build.Duration(k.HttpCookie.GetTtl())}}}
	case *networking.LoadBalancerSettings_ConsistentHashLB_UseSourceIp:
		if k.UseSourceIp {
			p = &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_ConnectionProperties_{ConnectionProperties: &routev3.RouteAction_HashPolicy_ConnectionProperties{SourceIp: true}}}
		}
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpQueryParameterName:
		p = &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_QueryParameter_{QueryParameter: &routev3.RouteAction_HashPolicy_QueryParameter{Name: k.HttpQueryParameterName}}}
	}
	if p == nil {
		return nil
	}
	return []*routev3.RouteAction_HashPolicy{p}
}

// GRPCChannelIDKey is the filter state key grpc-go hashes as the
// client channel's identity (gRFC A42).
const GRPCChannelIDKey = "io.grpc.channel_id"

// grpcConsistentHash is consistentHash for proxyless gRPC clients, as
// grpc-go's ring hash reads route hash policies (gRFC A42): a header as
// for Envoy; useSourceIp as the client channel's identity (filter state
// io.grpc.channel_id), which keeps each client channel on one endpoint as
// source-IP hashing keeps each client host; cookies and query parameters
// have no gRPC counterpart (nil: grpc-go then hashes at random; the
// cluster reports it).
func grpcConsistentHash(ch *networking.LoadBalancerSettings_ConsistentHashLB) []*routev3.RouteAction_HashPolicy {
	switch k := ch.GetHashKey().(type) {
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName:
		return consistentHash(ch)
	case *networking.LoadBalancerSettings_ConsistentHashLB_UseSourceIp:
		if k.UseSourceIp {
			return []*routev3.RouteAction_HashPolicy{{PolicySpecifier: &routev3.RouteAction_HashPolicy_FilterState_{
				FilterState: &routev3.RouteAction_HashPolicy_FilterState{Key: GRPCChannelIDKey}}}}
		}
	}
	return nil
}
