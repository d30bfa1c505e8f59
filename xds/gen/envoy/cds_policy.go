package envoy

import (
	"math"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/xds/gen/build"
)

// unsupported reports the parts of a traffic policy nave does not
// generate yet.
func (b *cdsBuilder) unsupported(oc *outboundCluster) {
	p := oc.Policy
	if p == nil {
		return
	}
	if p.GetTunnel() != nil {
		b.problems.Addf(oc.Rule.Ref(), oc.Field("tunnel"), "tunnel settings are not supported yet; ignored")
	}
	if p.GetProxyProtocol() != nil {
		b.problems.Addf(oc.Rule.Ref(), oc.Field("proxyProtocol"), "proxyProtocol is not supported yet; ignored")
	}
	if p.GetLoadBalancer().GetZoneAwareLbSetting() != nil {
		b.problems.Addf(oc.Rule.Ref(), oc.Field("loadBalancer")+".zoneAwareLbSetting", "zoneAwareLbSetting is not supported yet; ignored")
	}
	if len(p.GetOutlierDetection().GetOutlierDetectionHttpErrorCodes()) > 0 {
		b.problems.Addf(oc.Rule.Ref(), oc.Field("outlierDetection")+".outlierDetectionHttpErrorCodes", "custom outlier detection error codes are not supported yet; ignored")
	}
}

// loadBalancer applies loadBalancer.simple / consistentHash / warmup. The
// hash policy itself (what to hash) belongs on routes. Unset, a cluster
// balances LEAST_REQUEST, as Istio's do (docs/api-support.md, "Defaults").
func (b *cdsBuilder) loadBalancer(c *clusterv3.Cluster, oc *outboundCluster) {
	lb := oc.Policy.GetLoadBalancer()
	if oc.kind == kindOriginalDst {
		return // CLUSTER_PROVIDED; no choice to make
	}
	warmup := lb.GetWarmup().GetDuration()
	if warmup == nil {
		warmup = lb.GetWarmupDurationSecs()
	}
	var slowStart *clusterv3.Cluster_SlowStartConfig
	if warmup != nil {
		slowStart = &clusterv3.Cluster_SlowStartConfig{SlowStartWindow: build.Duration(warmup)}
		if a := lb.GetWarmup().GetAggression(); a != nil {
			slowStart.Aggression = &corev3.RuntimeDouble{DefaultValue: a.GetValue(), RuntimeKey: "upstream.slow_start.aggression." + oc.Name}
		}
		if m := lb.GetWarmup().GetMinimumPercent(); m != nil {
			slowStart.MinWeightPercent = &typev3.Percent{Value: m.GetValue()}
		}
	}
	if ch := lb.GetConsistentHash(); ch != nil {
		if mg := ch.GetMaglev(); mg != nil {
			c.LbPolicy = clusterv3.Cluster_MAGLEV
			if mg.GetTableSize() != 0 {
				c.LbConfig = &clusterv3.Cluster_MaglevLbConfig_{MaglevLbConfig: &clusterv3.Cluster_MaglevLbConfig{TableSize: wrapperspb.UInt64(mg.GetTableSize())}}
			}
		} else {
			c.LbPolicy = clusterv3.Cluster_RING_HASH
			size := ch.GetRingHash().GetMinimumRingSize()
			if size == 0 {
				//lint:ignore SA1019 users still write the deprecated field; honour it
				size = ch.GetMinimumRingSize()
			}
			if size != 0 {
				c.LbConfig = &clusterv3.Cluster_RingHashLbConfig_{RingHashLbConfig: &clusterv3.Cluster_RingHashLbConfig{MinimumRingSize: wrapperspb.UInt64(size)}}
			}
		}
		if slowStart != nil {
			b.problems.Addf(oc.Rule.Ref(), oc.Field("loadBalancer")+".warmup", "slow start works only with ROUND_ROBIN and LEAST_REQUEST load balancing; ignored for consistent hashing")
		}
		return
	}
	switch lb.GetSimple() {
	case networking.LoadBalancerSettings_ROUND_ROBIN:
		c.LbPolicy = clusterv3.Cluster_ROUND_ROBIN
		if slowStart != nil {
			c.LbConfig = &clusterv3.Cluster_RoundRobinLbConfig_{RoundRobinLbConfig: &clusterv3.Cluster_RoundRobinLbConfig{SlowStartConfig: slowStart}}
		}
	case networking.LoadBalancerSettings_RANDOM:
		c.LbPolicy = clusterv3.Cluster_RANDOM
		if slowStart != nil {
			b.problems.Addf(oc.Rule.Ref(), oc.Field("loadBalancer")+".warmup", "slow start works only with ROUND_ROBIN and LEAST_REQUEST load balancing; ignored for RANDOM")
		}
	default: // UNSPECIFIED (Istio's default), LEAST_REQUEST, LEAST_CONN (its deprecated name)
		c.LbPolicy = clusterv3.Cluster_LEAST_REQUEST
		if slowStart != nil {
			c.LbConfig = &clusterv3.Cluster_LeastRequestLbConfig_{LeastRequestLbConfig: &clusterv3.Cluster_LeastRequestLbConfig{SlowStartConfig: slowStart}}
		}
	}
}

// connectionPool applies connectionPool: circuit breaker thresholds, the
// connect timeout, TCP keepalive, and (HTTP ports) upstream HTTP protocol
// options. HTTP2/GRPC ports always get explicit HTTP/2.
func (b *cdsBuilder) connectionPool(c *clusterv3.Cluster, oc *outboundCluster) {
	cp := oc.Policy.GetConnectionPool()
	tcp, http := cp.GetTcp(), cp.GetHttp()
	if t := tcp.GetConnectTimeout(); t != nil {
		c.ConnectTimeout = build.Duration(t)
	}
	if tcp.GetMaxConnections() > 0 || http.GetHttp1MaxPendingRequests() > 0 || http.GetHttp2MaxRequests() > 0 || http.GetMaxRetries() > 0 {
		th := defaultThresholds()
		if n := tcp.GetMaxConnections(); n > 0 {
			th.MaxConnections = wrapperspb.UInt32(uint32(n))
		}
		if n := http.GetHttp1MaxPendingRequests(); n > 0 {
			th.MaxPendingRequests = wrapperspb.UInt32(uint32(n))
		}
		if n := http.GetHttp2MaxRequests(); n > 0 {
			th.MaxRequests = wrapperspb.UInt32(uint32(n))
		}
		if n := http.GetMaxRetries(); n > 0 {
			th.MaxRetries = wrapperspb.UInt32(uint32(n))
		}
		c.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{th}}
	}
	if ka := tcp.GetTcpKeepalive(); ka != nil {
		k := &corev3.TcpKeepalive{}
		if ka.GetProbes() > 0 {
			k.KeepaliveProbes = wrapperspb.UInt32(ka.GetProbes())
		}
		if t := ka.GetTime(); t != nil {
			k.KeepaliveTime = wrapperspb.UInt32(keepaliveSeconds(t))
		}
		if t := ka.GetInterval(); t != nil {
			k.KeepaliveInterval = wrapperspb.UInt32(keepaliveSeconds(t))
		}
		c.UpstreamConnectionOptions = &clusterv3.UpstreamConnectionOptions{TcpKeepalive: k}
	}
	sniffed := isSniffed(oc.Port.Protocol)
	if !isHTTP(oc.Port.Protocol) && !sniffed {
		return
	}
	if http == nil && tcp.GetMaxConnectionDuration() == nil {
		switch {
		case isHTTP2(oc.Port.Protocol):
			c.TypedExtensionProtocolOptions = b.h2 // the common case: shared
		case sniffed:
			c.TypedExtensionProtocolOptions = b.downstream()
		}
		return
	}
	common := &corev3.HttpProtocolOptions{}
	hasCommon := false
	if t := http.GetIdleTimeout(); t != nil {
		common.IdleTimeout, hasCommon = build.Duration(t), true
	}
	if n := http.GetMaxRequestsPerConnection(); n > 0 {
		common.MaxRequestsPerConnection, hasCommon = wrapperspb.UInt32(uint32(n)), true
	}
	if t := tcp.GetMaxConnectionDuration(); t != nil {
		common.MaxConnectionDuration, hasCommon = build.Duration(t), true
	}
	var h2 *corev3.Http2ProtocolOptions
	if n := http.GetMaxConcurrentStreams(); n > 0 {
		h2 = &corev3.Http2ProtocolOptions{MaxConcurrentStreams: wrapperspb.UInt32(uint32(n))}
	}
	if ka := http.GetHttp2KeepAlive(); ka != nil {
		if h2 == nil {
			h2 = &corev3.Http2ProtocolOptions{}
		}
		h2.ConnectionKeepalive = &corev3.KeepaliveSettings{Interval: build.Duration(ka.GetInterval()), Timeout: build.Duration(ka.GetTimeout())}
		if h2.ConnectionKeepalive.Timeout == nil {
			h2.ConnectionKeepalive.Timeout = durationpb.New(20e9) // Envoy requires one; Istio's default
		}
	}
	// h2UpgradePolicy UPGRADE makes a plain HTTP/1.1 port speak HTTP/2
	// upstream; HTTP2/GRPC ports always do.
	useH2 := isHTTP2(oc.Port.Protocol) ||
		(oc.Port.Protocol == "HTTP" && http.GetH2UpgradePolicy() == networking.ConnectionPoolSettings_HTTPSettings_UPGRADE)
	opts := &upstreamhttpv3.HttpProtocolOptions{}
	switch {
	case http.GetUseClientProtocol() || sniffed:
		// A sniffed port's HTTP goes upstream as the client spoke it
		// (h2c stays HTTP/2), as in Istio.
		// Envoy: use_downstream_protocol_config speaks whatever the client spoke.
		opts.UpstreamProtocolOptions = &upstreamhttpv3.HttpProtocolOptions_UseDownstreamProtocolConfig{UseDownstreamProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_UseDownstreamHttpConfig{
			HttpProtocolOptions:  &corev3.Http1ProtocolOptions{},
			Http2ProtocolOptions: h2OrEmpty(h2),
		}}
	case useH2:
		if !hasCommon && h2 == nil {
			c.TypedExtensionProtocolOptions = b.h2
			return
		}
		opts.UpstreamProtocolOptions = explicitHTTP2(h2)
	case hasCommon:
		opts.UpstreamProtocolOptions = &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{HttpProtocolOptions: &corev3.Http1ProtocolOptions{}},
		}}
	default:
		return // plain HTTP/1.1 with Envoy's defaults
	}
	if hasCommon {
		opts.CommonHttpProtocolOptions = common
	}
	c.TypedExtensionProtocolOptions = map[string]*anypb.Any{httpProtocolOptionsName: build.Any(opts)}
}

// keepaliveSeconds converts a keepalive duration to Envoy's whole
// seconds, rounding up so that a sub-second setting stays non-zero.
func keepaliveSeconds(d *durationpb.Duration) uint32 {
	return uint32(math.Ceil(d.AsDuration().Seconds()))
}

// downstream is the protocol options of clusters of sniffed ports without
// HTTP settings: HTTP upstream as the client spoke it (built on first
// use, shared).
func (b *cdsBuilder) downstream() map[string]*anypb.Any {
	if b.useDownstream == nil {
		b.useDownstream = map[string]*anypb.Any{httpProtocolOptionsName: build.Any(&upstreamhttpv3.HttpProtocolOptions{
			UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_UseDownstreamProtocolConfig{UseDownstreamProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_UseDownstreamHttpConfig{
				HttpProtocolOptions:  &corev3.Http1ProtocolOptions{},
				Http2ProtocolOptions: &corev3.Http2ProtocolOptions{},
			}},
		})}
	}
	return b.useDownstream
}

func h2OrEmpty(h2 *corev3.Http2ProtocolOptions) *corev3.Http2ProtocolOptions {
	if h2 == nil {
		return &corev3.Http2ProtocolOptions{}
	}
	return h2
}

// outlierDetection maps outlierDetection as Istio does:
// consecutive5xxErrors and consecutiveGatewayErrors set the counts and
// enforce them fully when non-zero (0 turns that detector off; an unset
// consecutive5xxErrors keeps Envoy's default of 5); minHealthPercent is the
// cluster's healthy panic threshold (Envoy: "Panic threshold"), so 0 (the
// default) turns panic mode off and ejection always applies.
func (b *cdsBuilder) outlierDetection(c *clusterv3.Cluster, oc *outboundCluster) {
	od := oc.Policy.GetOutlierDetection()
	if od == nil {
		return
	}
	out := &clusterv3.OutlierDetection{
		Interval:         build.Duration(od.GetInterval()),
		BaseEjectionTime: build.Duration(od.GetBaseEjectionTime()),
	}
	//lint:ignore SA1019 consecutiveErrors is deprecated but still honoured (it counted 502/503/504 only)
	legacy := od.GetConsecutiveErrors()
	if n := od.GetConsecutive_5XxErrors(); n != nil {
		out.Consecutive_5Xx = wrapperspb.UInt32(n.GetValue())
		out.EnforcingConsecutive_5Xx = wrapperspb.UInt32(enforce(n.GetValue()))
	} else if legacy > 0 {
		out.ConsecutiveGatewayFailure = wrapperspb.UInt32(uint32(legacy))
		out.EnforcingConsecutiveGatewayFailure = wrapperspb.UInt32(100)
		out.EnforcingConsecutive_5Xx = wrapperspb.UInt32(0)
	}
	if n := od.GetConsecutiveGatewayErrors(); n != nil {
		out.ConsecutiveGatewayFailure = wrapperspb.UInt32(n.GetValue())
		out.EnforcingConsecutiveGatewayFailure = wrapperspb.UInt32(enforce(n.GetValue()))
	}
	if od.GetSplitExternalLocalOriginErrors() {
		out.SplitExternalLocalOriginErrors = true
		if n := od.GetConsecutiveLocalOriginFailures(); n != nil {
			out.ConsecutiveLocalOriginFailure = wrapperspb.UInt32(n.GetValue())
			out.EnforcingConsecutiveLocalOriginFailure = wrapperspb.UInt32(enforce(n.GetValue()))
		}
	}
	if p := od.GetMaxEjectionPercent(); p > 0 {
		out.MaxEjectionPercent = wrapperspb.UInt32(uint32(min(p, 100)))
	}
	c.OutlierDetection = out
	if c.CommonLbConfig == nil {
		c.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{}
	}
	c.CommonLbConfig.HealthyPanicThreshold = &typev3.Percent{Value: float64(min(max(od.GetMinHealthPercent(), 0), 100))}
}

func enforce(n uint32) uint32 {
	if n > 0 {
		return 100
	}
	return 0
}
