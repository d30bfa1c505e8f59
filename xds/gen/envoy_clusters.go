package gen

import (
	"math"
	"slices"
	"strconv"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/policy"
	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// httpProtocolOptionsName is the typed_extension_protocol_options key of
// upstream HTTP settings (Envoy: extensions.upstreams.http.v3).
const httpProtocolOptionsName = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

// defaultConnectTimeout is Istio's mesh default connectTimeout (Envoy's own
// default is 5s).
var defaultConnectTimeout = durationpb.New(10e9)

// clusterKind is how Envoy finds a cluster's endpoints.
type clusterKind int

const (
	kindEDS         clusterKind = iota // endpoints over EDS (resolution STATIC)
	kindOriginalDst                    // the connection's original destination (NONE, or LB PASSTHROUGH)
	kindStrictDNS                      // every address of every endpoint host name (DNS)
	kindLogicalDNS                     // one host name, one connection target at a time (DNS_ROUND_ROBIN)
)

// outboundCluster is one outbound cluster: a service port, optionally
// narrowed to a DestinationRule subset, with the traffic policy that
// applies. Clusters and Endpoints both enumerate these, so that the EDS
// resources are exactly those of the EDS clusters.
type outboundCluster struct {
	name   string
	svc    *mesh.Service
	port   mesh.Port
	subset string
	labels map[string]string // subset labels; nil for the whole service
	dr     *mesh.Config
	policy *networking.TrafficPolicy // merged for port and subset; may be nil
	kind   clusterKind
}

// policyField names where part of oc's traffic policy was set, for
// problems (policy.Field).
func (oc *outboundCluster) policyField(part string) string {
	return policy.Field(oc.dr.DestinationRule(), oc.port.Number, oc.subset, part)
}

// outboundClusters calls fn for every outbound cluster of the proxy, in
// service, port, subset order: one per visible service port, and one per
// subset of the DestinationRule that applies to the host.
func outboundClusters(v *scope.View, fn func(*outboundCluster)) {
	for _, svc := range v.Services() {
		serviceClusters(v, svc, fn)
	}
}

// serviceClusters calls fn for each outbound cluster of one service.
func serviceClusters(v *scope.View, svc *mesh.Service, fn func(*outboundCluster)) {
	dr := v.DestinationRule(svc.Hostname)
	spec := dr.DestinationRule()
	for _, p := range svc.Ports {
		oc := &outboundCluster{name: build.ClusterName(svc.Hostname, p.Number, ""), svc: svc, port: p, dr: dr}
		oc.policy = policy.TrafficPolicyFor(spec, p.Number, "")
		oc.kind = kindFor(svc.Resolution, oc.policy)
		fn(oc)
		for i, ss := range spec.GetSubsets() {
			if slices.ContainsFunc(spec.GetSubsets()[:i], func(o *networking.Subset) bool { return o.GetName() == ss.GetName() }) {
				v.Problems().Addf(dr.Ref(), "spec.subsets["+strconv.Itoa(i)+"].name", "subset %q is defined twice; the first definition applies", ss.GetName())
				continue
			}
			sc := &outboundCluster{name: build.ClusterName(svc.Hostname, p.Number, ss.GetName()), svc: svc, port: p, subset: ss.GetName(), labels: ss.GetLabels(), dr: dr}
			sc.policy = policy.TrafficPolicyFor(spec, p.Number, ss.GetName())
			sc.kind = kindFor(svc.Resolution, sc.policy)
			fn(sc)
		}
	}
}

func kindFor(r mesh.Resolution, policy *networking.TrafficPolicy) clusterKind {
	// LB PASSTHROUGH means "connect to the address the client asked
	// for", which is what an original-destination cluster does.
	if policy.GetLoadBalancer().GetSimple() == networking.LoadBalancerSettings_PASSTHROUGH {
		return kindOriginalDst
	}
	switch r {
	case mesh.ResolutionNone:
		return kindOriginalDst
	case mesh.ResolutionDNS:
		return kindStrictDNS
	case mesh.ResolutionDNSRoundRb:
		return kindLogicalDNS
	}
	return kindEDS
}

// cdsBuilder holds the sub-messages every cluster of one call shares. They
// are read-only once built: several clusters point at the same message.
//
// A cdsBuilder belongs to one goroutine.
type cdsBuilder struct {
	v        *scope.View
	problems *build.Problems
	// assignments builds the inline assignments of DNS clusters.
	assignments *edsBuilder
	ads         *corev3.ConfigSource
	breakers    *clusterv3.CircuitBreakers // Istio's defaults: no limits
	h2          map[string]*anypb.Any      // typed_extension_protocol_options: explicit HTTP/2, nothing else
	eds         *clusterv3.Cluster_Type
	// rawBuffer and istioMatch are auto-mTLS's plain-text socket and
	// tlsMode: istio match (built on first use).
	rawBuffer  *corev3.TransportSocket
	istioMatch *structpb.Struct
	// autoContext is auto-mTLS's UpstreamTlsContext without its SNI,
	// marshalled; autoModes the service namespaces' mesh/namespace-wide
	// mTLS modes (both built on first use; see autoMTLS).
	autoContext []byte
	autoModes   map[string]policy.MTLSMode
}

func newCDSBuilder(v *scope.View) *cdsBuilder {
	return &cdsBuilder{
		v:           v,
		problems:    v.Problems(),
		assignments: newEDSBuilder(v),
		ads:         build.ADSConfigSource(),
		breakers:    &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{defaultThresholds()}},
		h2: map[string]*anypb.Any{httpProtocolOptionsName: build.Any(&upstreamhttpv3.HttpProtocolOptions{
			UpstreamProtocolOptions: explicitHTTP2(nil),
		})},
		eds: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
	}
}

// defaultThresholds lifts Envoy's default circuit breaker limits (1024
// connections/requests, 3 retries), as Istio does: limits apply only when
// a DestinationRule sets them.
func defaultThresholds() *clusterv3.CircuitBreakers_Thresholds {
	return &clusterv3.CircuitBreakers_Thresholds{
		MaxConnections:     wrapperspb.UInt32(math.MaxUint32),
		MaxPendingRequests: wrapperspb.UInt32(math.MaxUint32),
		MaxRequests:        wrapperspb.UInt32(math.MaxUint32),
		MaxRetries:         wrapperspb.UInt32(math.MaxUint32),
	}
}

func explicitHTTP2(opts *corev3.Http2ProtocolOptions) *upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_ {
	if opts == nil {
		opts = &corev3.Http2ProtocolOptions{}
	}
	return &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{
		ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: opts},
	}}
}

// Clusters generates the proxy's clusters: the outbound clusters of every
// visible service port and DestinationRule subset, BlackHoleCluster and
// PassthroughCluster, and for sidecars InboundPassthroughCluster and one
// inbound cluster per port the workload serves. Routers get no inbound
// clusters. Outbound clusters originate TLS per their DestinationRule, or
// auto-mTLS to endpoints that run a sidecar (cds_tls.go).
func Clusters(v *scope.View) []Resource {
	b := newCDSBuilder(v)
	var out []Resource
	outboundClusters(v, func(oc *outboundCluster) {
		out = append(out, Resource{Name: oc.name, Message: b.outbound(oc)})
	})
	out = append(out,
		Resource{Name: build.BlackHoleCluster, Message: &clusterv3.Cluster{
			Name:                 build.BlackHoleCluster,
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
			ConnectTimeout:       defaultConnectTimeout,
		}},
		Resource{Name: build.PassthroughCluster, Message: originalDst(build.PassthroughCluster, b.breakers)},
	)
	if v.Key().Type == proxy.Sidecar {
		out = append(out, Resource{Name: build.InboundPassthroughCluster, Message: originalDst(build.InboundPassthroughCluster, b.breakers)})
		for _, in := range v.InboundPorts() {
			name := build.InboundClusterName(in.TargetPort)
			out = append(out, Resource{Name: name, Message: b.inbound(name, in)})
		}
	}
	return out
}

func originalDst(name string, breakers *clusterv3.CircuitBreakers) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_ORIGINAL_DST},
		LbPolicy:             clusterv3.Cluster_CLUSTER_PROVIDED,
		ConnectTimeout:       defaultConnectTimeout,
		CircuitBreakers:      breakers,
	}
}

// inbound is the cluster a sidecar forwards its workload's inbound traffic
// to: 127.0.0.1 at the workload port. Istio ≥1.10 forwards to the pod IP
// instead, so that applications bound only to the pod IP are reachable and
// ones bound only to localhost are not exposed to the network through the
// sidecar. We keep loopback for now because it depends on nothing but the
// port (the cluster is byte-identical for every replica of a workload, so
// its marshalled form can be shared) and works for the common case of
// applications listening on 0.0.0.0; moving to the pod IP is a change of
// this one address (to the key's instance IP), e.g. behind an option.
func (b *cdsBuilder) inbound(name string, in scope.InboundPort) *clusterv3.Cluster {
	c := &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout:       defaultConnectTimeout,
		CircuitBreakers:      b.breakers,
		LoadAssignment: &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{
			LbEndpoints: []*endpointv3.LbEndpoint{{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: build.SocketAddress("127.0.0.1", in.TargetPort),
			}}}},
		}}},
	}
	if IsHTTP2(in.Port.Protocol) {
		c.TypedExtensionProtocolOptions = b.h2
	}
	return c
}

// outbound builds one outbound cluster.
func (b *cdsBuilder) outbound(oc *outboundCluster) *clusterv3.Cluster {
	c := &clusterv3.Cluster{
		Name:            oc.name,
		ConnectTimeout:  defaultConnectTimeout,
		CircuitBreakers: b.breakers,
	}
	switch oc.kind {
	case kindEDS:
		c.ClusterDiscoveryType = b.eds
		c.EdsClusterConfig = &clusterv3.Cluster_EdsClusterConfig{EdsConfig: b.ads, ServiceName: oc.name}
	case kindOriginalDst:
		c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_ORIGINAL_DST}
		c.LbPolicy = clusterv3.Cluster_CLUSTER_PROVIDED
	case kindStrictDNS, kindLogicalDNS:
		t := clusterv3.Cluster_STRICT_DNS
		if oc.kind == kindLogicalDNS {
			t = clusterv3.Cluster_LOGICAL_DNS
		}
		c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: t}
		// Istio resolves IPv4 only unless the proxy is dual-stack, which
		// the generation key does not model yet.
		c.DnsLookupFamily = clusterv3.Cluster_V4_ONLY
		c.LoadAssignment = b.assignments.assignment(oc)
		if oc.kind == kindLogicalDNS && len(c.LoadAssignment.GetEndpoints()) == 0 {
			// Envoy requires exactly one endpoint in a LOGICAL_DNS
			// cluster; a subset that selects none becomes an empty
			// STRICT_DNS cluster (no upstream, like an empty EDS subset).
			c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STRICT_DNS}
		}
	}
	b.unsupported(oc)
	b.loadBalancer(c, oc)
	b.connectionPool(c, oc)
	b.outlierDetection(c, oc)
	b.tls(c, oc)
	if oc.kind != kindOriginalDst && b.assignments.distribution(oc) != nil {
		if c.CommonLbConfig == nil {
			c.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{}
		}
		// Locality weights in the assignment only count with this set
		// (Envoy: "Locality weighted load balancing").
		c.CommonLbConfig.LocalityConfigSpecifier = &clusterv3.Cluster_CommonLbConfig_LocalityWeightedLbConfig_{
			LocalityWeightedLbConfig: &clusterv3.Cluster_CommonLbConfig_LocalityWeightedLbConfig{},
		}
	}
	return c
}

// unsupported reports the parts of a traffic policy nave does not
// generate yet.
func (b *cdsBuilder) unsupported(oc *outboundCluster) {
	p := oc.policy
	if p == nil {
		return
	}
	if p.GetTunnel() != nil {
		b.problems.Addf(oc.dr.Ref(), oc.policyField("tunnel"), "tunnel settings are not supported yet; ignored")
	}
	if p.GetProxyProtocol() != nil {
		b.problems.Addf(oc.dr.Ref(), oc.policyField("proxyProtocol"), "proxyProtocol is not supported yet; ignored")
	}
	if p.GetLoadBalancer().GetZoneAwareLbSetting() != nil {
		b.problems.Addf(oc.dr.Ref(), oc.policyField("loadBalancer")+".zoneAwareLbSetting", "zoneAwareLbSetting is not supported yet; ignored")
	}
	if len(p.GetOutlierDetection().GetOutlierDetectionHttpErrorCodes()) > 0 {
		b.problems.Addf(oc.dr.Ref(), oc.policyField("outlierDetection")+".outlierDetectionHttpErrorCodes", "custom outlier detection error codes are not supported yet; ignored")
	}
}

// loadBalancer applies loadBalancer.simple / consistentHash / warmup. The
// hash policy itself (what to hash) belongs on routes.
func (b *cdsBuilder) loadBalancer(c *clusterv3.Cluster, oc *outboundCluster) {
	lb := oc.policy.GetLoadBalancer()
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
			slowStart.Aggression = &corev3.RuntimeDouble{DefaultValue: a.GetValue(), RuntimeKey: "upstream.slow_start.aggression." + oc.name}
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
			b.problems.Addf(oc.dr.Ref(), oc.policyField("loadBalancer")+".warmup", "slow start works only with ROUND_ROBIN and LEAST_REQUEST load balancing; ignored for consistent hashing")
		}
		return
	}
	switch lb.GetSimple() {
	//lint:ignore SA1019 LEAST_CONN is the deprecated name of LEAST_REQUEST; configs still use it
	case networking.LoadBalancerSettings_LEAST_REQUEST, networking.LoadBalancerSettings_LEAST_CONN:
		c.LbPolicy = clusterv3.Cluster_LEAST_REQUEST
		if slowStart != nil {
			c.LbConfig = &clusterv3.Cluster_LeastRequestLbConfig_{LeastRequestLbConfig: &clusterv3.Cluster_LeastRequestLbConfig{SlowStartConfig: slowStart}}
		}
	case networking.LoadBalancerSettings_RANDOM:
		c.LbPolicy = clusterv3.Cluster_RANDOM
		if slowStart != nil {
			b.problems.Addf(oc.dr.Ref(), oc.policyField("loadBalancer")+".warmup", "slow start works only with ROUND_ROBIN and LEAST_REQUEST load balancing; ignored for RANDOM")
		}
	default: // UNSPECIFIED, ROUND_ROBIN
		c.LbPolicy = clusterv3.Cluster_ROUND_ROBIN
		if slowStart != nil {
			c.LbConfig = &clusterv3.Cluster_RoundRobinLbConfig_{RoundRobinLbConfig: &clusterv3.Cluster_RoundRobinLbConfig{SlowStartConfig: slowStart}}
		}
	}
}

// connectionPool applies connectionPool: circuit breaker thresholds, the
// connect timeout, TCP keepalive, and (HTTP ports) upstream HTTP protocol
// options. HTTP2/GRPC ports always get explicit HTTP/2.
func (b *cdsBuilder) connectionPool(c *clusterv3.Cluster, oc *outboundCluster) {
	cp := oc.policy.GetConnectionPool()
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
	if !IsHTTP(oc.port.Protocol) {
		return
	}
	if http == nil && tcp.GetMaxConnectionDuration() == nil {
		if IsHTTP2(oc.port.Protocol) {
			c.TypedExtensionProtocolOptions = b.h2 // the common case: shared
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
	useH2 := IsHTTP2(oc.port.Protocol) ||
		(oc.port.Protocol == "HTTP" && http.GetH2UpgradePolicy() == networking.ConnectionPoolSettings_HTTPSettings_UPGRADE)
	opts := &upstreamhttpv3.HttpProtocolOptions{}
	switch {
	case http.GetUseClientProtocol():
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
	od := oc.policy.GetOutlierDetection()
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
