package envoy

import (
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/policy"
	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/mesh"
)

// edsBuilder builds the load assignments of one View's clusters, for EDS
// and for DNS clusters (inline). It belongs to one goroutine.
type edsBuilder struct {
	v        *scope.View
	problems *build.Problems
	// istioMeta is the endpoint metadata tlsMode: istio, shared.
	istioMeta *corev3.Metadata
}

func newEDSBuilder(v *scope.View) *edsBuilder {
	return &edsBuilder{v: v, problems: v.Problems()}
}

// Endpoints generates one ClusterLoadAssignment per EDS cluster (the
// outbound clusters of STATIC-resolution services and their subsets),
// named like the cluster. Original-destination and DNS clusters have no
// EDS resource (DNS clusters carry their assignment inline).
func Endpoints(v *scope.View) []build.Resource {
	b := newEDSBuilder(v)
	var out []build.Resource
	outboundClusters(v, func(oc *outboundCluster) {
		if oc.kind == kindEDS {
			out = append(out, build.Resource{Name: oc.Name, Message: b.assignment(oc)})
		}
	})
	return out
}

// EndpointsOf is Endpoints restricted to the clusters of the given
// services (hostnames): what changes when only their endpoints did.
func EndpointsOf(v *scope.View, hosts map[string]bool) []build.Resource {
	b := newEDSBuilder(v)
	var out []build.Resource
	sniHosts := routerAutoPassthroughHosts(v)
	for h := range hosts {
		svc := v.Service(h)
		if svc == nil {
			continue // not visible to this proxy
		}
		serviceClusters(v, svc, sniHosts, func(oc *outboundCluster) {
			if oc.kind == kindEDS {
				out = append(out, build.Resource{Name: oc.Name, Message: b.assignment(oc)})
			}
		})
	}
	return out
}

// assignment builds the load assignment of an EDS or DNS cluster: its
// endpoints grouped by locality (and priority, when locality failover
// applies), with locality weights from locality distribution when one
// applies to the proxy.
func (b *edsBuilder) assignment(oc *outboundCluster) *endpointv3.ClusterLoadAssignment {
	if oc.kind == kindEDS && localityIndependent(oc) && !b.v.Snapshot().ClusterLocal(oc.Service.Hostname) {
		// Without locality load balancing an EDS assignment reads only the
		// cluster (name, service, the DestinationRule that gave its subset
		// labels), the proxy's network, whether it is of Istio's build
		// (workload metadata), and the snapshot's mTLS policy for
		// each endpoint (tlsModeMetadata): every proxy that shares those
		// shares one assignment per snapshot (read-only from here on)
		// while any generation holds it; the snapshot keeps it weakly, as
		// only its marshalled bytes are served (mesh.MemoWeak). The
		// problems it finds are reported by the first proxy's generation.
		k := assignmentKey{name: oc.Name, svc: oc.Service, dr: oc.Rule, network: b.v.Key().Network, istioBuild: b.v.Key().IstioBuild}
		return mesh.MemoWeak(b.v.Snapshot(), k, func() *endpointv3.ClusterLoadAssignment { return b.newAssignment(oc) })
	}
	return b.newAssignment(oc)
}

// assignmentKey is everything an EDS assignment without locality load
// balancing reads (see assignment).
type assignmentKey struct {
	name       string
	svc        *mesh.Service
	dr         *mesh.Config
	network    string
	istioBuild bool
}

func (b *edsBuilder) newAssignment(oc *outboundCluster) *endpointv3.ClusterLoadAssignment {
	eps, gateways := b.clusterEndpoints(oc)
	tlsMode := func(ep *mesh.Endpoint) *corev3.Metadata {
		return b.tlsModeMetadata(oc.Service, ep, ep.PortFor(oc.Port))
	}
	meta := func(ep *mesh.Endpoint) *corev3.Metadata {
		if gateways[ep] {
			return b.gatewayMetadata()
		}
		if b.v.Key().IstioBuild {
			// Only Istio's stats filter reads an endpoint's "istio"
			// workload (decision 039): other proxies are not sent it.
			return build.WithEndpointWorkload(tlsMode(ep), oc.Service, ep)
		}
		return tlsMode(ep)
	}
	if oc.sniDNAT {
		// An SNI-DNAT cluster reaches only endpoints that accept mesh
		// mTLS (cds_snidnat.go).
		eps = slices.DeleteFunc(eps, func(ep *mesh.Endpoint) bool {
			return ep.Labels[tlsModeLabel] != tlsModeIstio || tlsMode(ep) == nil
		})
	}
	return build.LocalityAssignment(oc.Name, oc.Port, eps, b.localityLB(oc), meta)
}

// clusterEndpoints selects the endpoints of a cluster: the service's
// endpoints carrying the subset's labels that serve the cluster's port,
// in snapshot order.
//
// Endpoints on another network than the proxy's (both known and
// different) are never reached directly (a connection to another
// network's pod address would fail or reach the wrong workload): they are
// replaced by their network's gateways (split-horizon EDS, splitHorizon;
// gateways lists those endpoints), or left out when the network has
// none, when the cluster does not use mesh mTLS for them, or on an
// SNI-DNAT cluster (a gateway forwards only to its own network).
//
// A DNS service without endpoints resolves its own host name, as Istio's
// ServiceEntry does. A DNS_ROUND_ROBIN (LOGICAL_DNS) cluster takes exactly
// one host name, the first.
func (b *edsBuilder) clusterEndpoints(oc *outboundCluster) (eps []*mesh.Endpoint, gateways map[*mesh.Endpoint]bool) {
	snap, network := b.v.Snapshot(), b.v.Key().Network
	split := network != "" && !oc.sniDNAT && snap.MultiNetwork()
	var remote []*mesh.Endpoint
	eps = make([]*mesh.Endpoint, 0, len(oc.Service.Endpoints))
	for _, ep := range build.ClusterLocalEndpoints(snap, oc.Service.Hostname, b.v.Key().Cluster, oc.Service.Endpoints) {
		if !mesh.Matches(oc.Labels, ep.Labels) || !ep.Serves(oc.Port) {
			continue
		}
		if snap.OtherNetwork(ep, network) {
			if split {
				remote = append(remote, ep)
			}
			continue
		}
		eps = append(eps, ep)
	}
	if split {
		eps, gateways = b.splitHorizon(oc, eps, remote)
	}
	if oc.kind != kindStrictDNS && oc.kind != kindLogicalDNS {
		return eps, gateways
	}
	resource := oc.Service.Hostname
	if len(oc.Service.Sources) > 0 {
		resource = oc.Service.Sources[0]
	}
	if len(oc.Service.Endpoints) == 0 {
		if strings.HasPrefix(oc.Service.Hostname, "*") {
			b.problems.Addf(resource, "spec.resolution", "a wildcard host (%s) cannot be resolved by DNS without endpoints; the cluster has none", oc.Service.Hostname)
			return eps, gateways
		}
		eps = append(eps, &mesh.Endpoint{Address: oc.Service.Hostname, Health: mesh.Healthy})
	}
	if oc.kind == kindLogicalDNS && len(eps) > 1 {
		b.problems.Addf(resource, "spec.endpoints", "resolution DNS_ROUND_ROBIN connects to one host name; using %s and ignoring %d more", eps[0].Address, len(eps)-1)
		eps = eps[:1]
	}
	return eps, gateways
}

// tlsModeMetadata is the metadata of an endpoint of svc serving port:
// tlsMode from its label, left out when the endpoint's own effective
// PeerAuthentication for that port is DISABLE (it would refuse mTLS).
// Nil when there is nothing to say.
func (b *edsBuilder) tlsModeMetadata(svc *mesh.Service, ep *mesh.Endpoint, port uint32) *corev3.Metadata {
	mode := ep.Labels[tlsModeLabel]
	if mode == "" {
		return nil
	}
	if snap := b.v.Snapshot(); policy.DisablesMTLS(snap) {
		m, problems := policy.EffectiveMTLS(snap, svc.Namespace, ep.Labels, port)
		for _, p := range problems {
			b.problems.Add(p)
		}
		if m == policy.MTLSDisable {
			return nil
		}
	}
	if mode == tlsModeIstio {
		if b.istioMeta == nil {
			b.istioMeta = tlsModeMeta(mode)
		}
		return b.istioMeta
	}
	return tlsModeMeta(mode)
}

func tlsModeMeta(mode string) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		transportSocketMatchKey: {Fields: map[string]*structpb.Value{"tlsMode": structpb.NewStringValue(mode)}},
	}}
}
