package envoy

import (
	"math"
	"slices"
	"strconv"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
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
// default is 5s), mesh.DefaultConnectTimeout as shared message.
var defaultConnectTimeout = durationpb.New(mesh.DefaultConnectTimeout)

// connectTimeout is the snapshot's mesh-wide cluster connect timeout
// (mesh.Snapshot.ConnectTimeout).
func connectTimeout(s *mesh.Snapshot) *durationpb.Duration {
	if d := s.ConnectTimeout(); d != mesh.DefaultConnectTimeout {
		return durationpb.New(d)
	}
	return defaultConnectTimeout
}

// clusterKind is how Envoy finds a cluster's endpoints.
type clusterKind int

const (
	kindEDS         clusterKind = iota // endpoints over EDS (resolution STATIC)
	kindOriginalDst                    // the connection's original destination (NONE, or LB PASSTHROUGH)
	kindStrictDNS                      // every address of every endpoint host name (DNS)
	kindLogicalDNS                     // one host name, one connection target at a time (DNS_ROUND_ROBIN)
)

// outboundCluster is one outbound cluster of the proxy and how Envoy
// finds its endpoints. Clusters and Endpoints both enumerate these, so
// that the EDS resources are exactly those of the EDS clusters.
type outboundCluster struct {
	policy.Cluster
	kind clusterKind
	// sniDNAT marks the SNI-DNAT twin of a cluster (cds_snidnat.go),
	// named by its SNI.
	sniDNAT bool
}

// outboundClusters calls fn for every outbound cluster of the proxy, in
// service, port, subset order: one per visible service port, and one per
// subset of the DestinationRule that applies to the host; on a router
// with AUTO_PASSTHROUGH servers, each followed by its SNI-DNAT twin when
// it has one.
func outboundClusters(v *scope.View, fn func(*outboundCluster)) {
	sniHosts := routerAutoPassthroughHosts(v)
	for _, svc := range v.Services() {
		serviceClusters(v, svc, sniHosts, fn)
	}
}

// serviceClusters calls fn for each outbound cluster of one service, and
// after each its SNI-DNAT twin when the service is one an
// AUTO_PASSTHROUGH server with sniHosts forwards to. A subset defined
// twice is reported, and only its first definition used.
func serviceClusters(v *scope.View, svc *mesh.Service, sniHosts []string, fn func(*outboundCluster)) {
	dr := v.DestinationRule(svc.Hostname)
	subsets := dr.DestinationRule().GetSubsets()
	dnat := len(sniHosts) > 0 && autoPassthroughService(sniHosts, svc)
	policy.Clusters(v.Snapshot(), svc, dr, func(c *policy.Cluster) {
		if i := c.SubsetIndex; i > 0 && slices.ContainsFunc(subsets[:i], func(o *networking.Subset) bool { return o.GetName() == c.Subset }) {
			v.Problems().Addf(dr.Ref(), "spec.subsets["+strconv.Itoa(i)+"].name", "subset %q is defined twice; the first definition applies", c.Subset)
			return
		}
		oc := &outboundCluster{Cluster: *c, kind: kindFor(svc.Resolution, c.Policy)}
		fn(oc)
		if dnat && sniDNATCluster(oc) {
			twin := *oc
			twin.Name, twin.sniDNAT = IstioMutualSNI(svc.Hostname, c.Port.Number, c.Subset), true
			fn(&twin)
		}
	})
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
	assignments   *edsBuilder
	ads           *corev3.ConfigSource
	sds           *corev3.ConfigSource       // of the workload secrets
	breakers      *clusterv3.CircuitBreakers // Istio's defaults: no limits
	h2            map[string]*anypb.Any      // typed_extension_protocol_options: explicit HTTP/2, nothing else
	useDownstream map[string]*anypb.Any      // use_downstream_protocol_config (sniffed ports; built on first use)
	eds           *clusterv3.Cluster_Type
	// istioMatch is auto-mTLS's tlsMode: istio match (built on first use).
	istioMatch *structpb.Struct
	// autoContext is auto-mTLS's UpstreamTlsContext without its SNI,
	// marshalled; autoModes the service namespaces' mesh/namespace-wide
	// mTLS modes (both built on first use; see autoMTLS).
	autoContext []byte
	autoModes   map[string]policy.MTLSMode
	// timeout is the mesh's connect timeout (MeshConfig connectTimeout).
	timeout *durationpb.Duration
}

func newCDSBuilder(v *scope.View) *cdsBuilder {
	return &cdsBuilder{
		v:           v,
		problems:    v.Problems(),
		assignments: newEDSBuilder(v),
		ads:         build.ADSConfigSource(),
		sds:         build.SDSConfigSource(v.Key().SDSCluster),
		breakers:    &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{defaultThresholds()}},
		h2: map[string]*anypb.Any{httpProtocolOptionsName: build.Any(&upstreamhttpv3.HttpProtocolOptions{
			UpstreamProtocolOptions: explicitHTTP2(nil),
		})},
		eds:     &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		timeout: connectTimeout(v.Snapshot()),
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
// visible service port and DestinationRule subset (and for a router with
// AUTO_PASSTHROUGH servers their SNI-DNAT twins), BlackHoleCluster and
// PassthroughCluster, and for sidecars InboundPassthroughCluster and one
// inbound cluster per port the workload serves. Routers get no inbound
// clusters. Outbound clusters originate TLS per their DestinationRule, or
// auto-mTLS to endpoints that run a sidecar (cds_tls.go).
func Clusters(v *scope.View) []build.Resource {
	b := newCDSBuilder(v)
	var out []build.Resource
	outboundClusters(v, func(oc *outboundCluster) {
		out = append(out, build.Resource{Name: oc.Name, Message: b.outbound(oc)})
	})
	out = append(out,
		build.Resource{Name: build.BlackHoleCluster, Message: &clusterv3.Cluster{
			Name:                 build.BlackHoleCluster,
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
			ConnectTimeout:       b.timeout,
		}},
		build.Resource{Name: build.PassthroughCluster, Message: originalDst(build.PassthroughCluster, b.breakers, b.timeout)},
	)
	if v.Key().Type == proxy.Sidecar {
		out = append(out, build.Resource{Name: build.InboundPassthroughCluster, Message: originalDst(build.InboundPassthroughCluster, b.breakers, b.timeout)})
		for _, in := range v.InboundPorts() {
			name := build.InboundClusterName(in.TargetPort)
			out = append(out, build.Resource{Name: name, Message: b.inbound(name, in)})
		}
	}
	return out
}

func originalDst(name string, breakers *clusterv3.CircuitBreakers, timeout *durationpb.Duration) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_ORIGINAL_DST},
		LbPolicy:             clusterv3.Cluster_CLUSTER_PROVIDED,
		ConnectTimeout:       timeout,
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
		ConnectTimeout:       b.timeout,
		CircuitBreakers:      b.breakers,
		LoadAssignment: &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{
			LbEndpoints: []*endpointv3.LbEndpoint{{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: build.SocketAddress("127.0.0.1", in.TargetPort),
			}}}},
		}}},
	}
	if isHTTP2(in.Port.Protocol) {
		c.TypedExtensionProtocolOptions = b.h2
	} else if isSniffed(in.Port.Protocol) {
		c.TypedExtensionProtocolOptions = b.downstream()
	}
	return c
}

// outbound builds one outbound cluster.
func (b *cdsBuilder) outbound(oc *outboundCluster) *clusterv3.Cluster {
	c := &clusterv3.Cluster{
		Name:            oc.Name,
		ConnectTimeout:  b.timeout,
		CircuitBreakers: b.breakers,
	}
	if b.v.Key().IstioBuild {
		// Only Istio's stats filter reads the cluster's "istio" services
		// (decision 039).
		c.Metadata = build.ClusterMetadata(oc.Service, false)
	}
	switch oc.kind {
	case kindEDS:
		c.ClusterDiscoveryType = b.eds
		// No service_name: Envoy subscribes to the cluster's name when it
		// is empty (decision 055).
		c.EdsClusterConfig = &clusterv3.Cluster_EdsClusterConfig{EdsConfig: b.ads}
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
	if !oc.sniDNAT {
		b.tls(c, oc)
	}
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
