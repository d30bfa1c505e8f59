package proxyless

import (
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/policy"
	"github.com/navemesh/nave/xds/mesh"
)

// clusters adds a cluster and its endpoints for every port of svc, and for
// every subset of its DestinationRule.
func (g *generator) clusters(svc *mesh.Service) {
	g.eachCluster(svc, g.cluster)
}

// eachCluster calls fn for every port of svc, and every subset of its
// DestinationRule, with the traffic policy that applies merged as for
// Envoy (policy.Clusters); not for clusters whose TLS proxyless clients
// cannot have (tlsSupported).
func (g *generator) eachCluster(svc *mesh.Service, fn func(oc *policy.Cluster)) {
	policy.Clusters(g.snap, svc, g.snap.DestinationRule(svc.Hostname, ""), func(oc *policy.Cluster) {
		if g.tlsSupported(oc) {
			fn(oc)
		}
	})
}

func (g *generator) cluster(oc *policy.Cluster) {
	c := &clusterv3.Cluster{
		Name:                 oc.Name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		// No service_name: grpc-go watches the cluster's name when it is
		// empty (decision 055).
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{EdsConfig: build.ADSConfigSource()},
		LbPolicy:         clusterv3.Cluster_LEAST_REQUEST,
		TransportSocket:  g.transportSocket(oc.Policy.GetTls(), oc.Service.SubjectAltNames),
		// grpc-go's CSM observability labels its metrics with the service
		// (csm.service_name, csm.service_namespace_name) from here.
		Metadata: build.ClusterMetadata(oc.Service, true),
	}
	lb := oc.Policy.GetLoadBalancer()
	distribute := distributes(oc.Policy)
	switch {
	case lb.GetConsistentHash() != nil:
		g.ringHash(c, oc, lb.GetConsistentHash())
	case lb.GetSimple() == networking.LoadBalancerSettings_ROUND_ROBIN:
		c.LbPolicy = clusterv3.Cluster_ROUND_ROBIN
	case lb.GetSimple() == networking.LoadBalancerSettings_RANDOM:
		g.problems.Addf(oc.Rule.Ref(), oc.Field("loadBalancer")+".simple", "proxyless gRPC clients have no RANDOM load balancer; they use LEAST_REQUEST")
	case lb.GetSimple() == networking.LoadBalancerSettings_UNSPECIFIED && distribute:
		// grpc-go weights localities only under ROUND_ROBIN
		// (xds_wrr_locality); its least request ignores them.
		c.LbPolicy = clusterv3.Cluster_ROUND_ROBIN
	}
	if c.LbPolicy == clusterv3.Cluster_LEAST_REQUEST && distribute {
		g.problems.Addf(oc.Rule.Ref(), oc.Field("loadBalancer")+".localityLbSetting.distribute", "proxyless gRPC clients ignore locality weights under LEAST_REQUEST (grpc-go); set ROUND_ROBIN or leave simple unset to have distribute applied")
	}
	g.add(typeurl.Cluster, oc.Name, c)
	g.add(typeurl.Endpoint, oc.Name, g.loadAssignment(oc))
}

// distributes reports whether p's locality load balancing has distribute
// entries (which some client may take: locality weights).
func distributes(p *networking.TrafficPolicy) bool {
	s, on := build.LocalitySetting(p)
	return on && len(s.GetDistribute()) > 0
}

// maxRingSize is the largest ring grpc-go builds (it refuses a larger
// minimum: balancer/ringhash ringHashSizeUpperBound).
const maxRingSize = 8 * 1024 * 1024

// ringHash is consistentHash for proxyless clients: grpc-go's ring hash
// (gRFC A42; xxHash, the only hash function it takes), hashing what the
// route's hash policy says (routes.Translator.HashPolicy). grpc-go has no
// Maglev (it refuses the cluster), so Maglev becomes a ring; it cannot
// hash cookies or query parameters (grpc-go then hashes each call at
// random). Those are reported.
func (g *generator) ringHash(c *clusterv3.Cluster, oc *policy.Cluster, ch *networking.LoadBalancerSettings_ConsistentHashLB) {
	field := oc.Field("loadBalancer") + ".consistentHash"
	c.LbPolicy = clusterv3.Cluster_RING_HASH
	size := ch.GetRingHash().GetMinimumRingSize()
	if size == 0 {
		//lint:ignore SA1019 users still write the deprecated field; honour it
		size = ch.GetMinimumRingSize()
	}
	if ch.GetMaglev() != nil {
		g.problems.Addf(oc.Rule.Ref(), field+".maglev", "proxyless gRPC clients have no Maglev load balancer; they use a ring hash (default size)")
		size = 0
	}
	if size > maxRingSize {
		g.problems.Addf(oc.Rule.Ref(), field+".ringHash.minimumRingSize", "grpc-go builds rings of at most %d entries; using %d", maxRingSize, maxRingSize)
		size = maxRingSize
	}
	if size != 0 {
		c.LbConfig = &clusterv3.Cluster_RingHashLbConfig_{RingHashLbConfig: &clusterv3.Cluster_RingHashLbConfig{MinimumRingSize: wrapperspb.UInt64(size)}}
	}
	switch ch.GetHashKey().(type) {
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpCookie:
		g.problems.Addf(oc.Rule.Ref(), field+".httpCookie", "proxyless gRPC clients cannot hash on a cookie; each call goes to a random endpoint of the ring")
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpQueryParameterName:
		g.problems.Addf(oc.Rule.Ref(), field+".httpQueryParameterName", "proxyless gRPC clients cannot hash on a query parameter; each call goes to a random endpoint of the ring")
	}
}
