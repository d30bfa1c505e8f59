package envoy

import (
	"cmp"
	"math"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/xds/gen/policy"
	"github.com/navemesh/nave/xds/mesh"
)

// splitHorizon is Istio's split-horizon EDS for a proxy on a network of a
// mesh with network gateways: local are the cluster's endpoints the proxy
// reaches directly, remote those on other networks. Every weight is
// multiplied by the mesh's gateway weight scale (so that it divides
// evenly among gateways); each healthy remote endpoint's weight is split
// among the gateways that lead to it (mesh.Snapshot.GatewaysFor), and
// each gateway becomes one endpoint per locality carrying the sum of the
// weights it stands for there, with tlsMode istio metadata (the
// cluster's mesh mTLS transport socket, whose SNI
// outbound_.PORT_.SUBSET_.HOST the gateway's AUTO_PASSTHROUGH server
// routes by). A remote endpoint is left out when its network has no
// gateway, and when the cluster would not reach it with mesh mTLS
// (crossNetworkMTLS): the gateway routes only mTLS by SNI. It returns
// the endpoints (local ones, then the gateways', by locality and gateway)
// and the set of gateway endpoints among them.
func (b *edsBuilder) splitHorizon(oc *outboundCluster, local, remote []*mesh.Endpoint) ([]*mesh.Endpoint, map[*mesh.Endpoint]bool) {
	snap := b.v.Snapshot()
	scale := snap.GatewayWeightScale()
	if scale > 1 {
		scaled := make([]*mesh.Endpoint, len(local))
		for i, ep := range local {
			c := *ep
			c.Weight = scaleWeight(ep.Weight, scale)
			scaled[i] = &c
		}
		local = scaled
	}
	if len(remote) == 0 {
		return local, nil
	}
	type key struct {
		gw       mesh.NetworkGateway
		locality mesh.Locality
	}
	weights := map[key]uint32{}
	var order []key
	mtls := b.crossNetworkMTLS(oc)
	for _, ep := range remote {
		if ep.Health != mesh.Healthy {
			continue
		}
		gws := snap.GatewaysFor(snap.NetworkOf(ep), ep.Cluster)
		if len(gws) == 0 || !mtls(ep) {
			continue
		}
		share := scaleWeight(ep.Weight, scale) / uint32(len(gws))
		for _, gw := range gws {
			k := key{gw, ep.Locality}
			if _, ok := weights[k]; !ok {
				order = append(order, k)
			}
			weights[k] = addWeight(weights[k], share)
		}
	}
	if len(order) == 0 {
		return local, nil
	}
	slices.SortFunc(order, func(a, b key) int {
		return cmp.Or(strings.Compare(a.locality.String(), b.locality.String()), cmp.Compare(a.gw.Network, b.gw.Network),
			cmp.Compare(a.gw.Cluster, b.gw.Cluster), cmp.Compare(a.gw.Address, b.gw.Address), cmp.Compare(a.gw.Port, b.gw.Port),
			cmp.Compare(a.gw.Source, b.gw.Source))
	})
	out := make([]*mesh.Endpoint, len(local), len(local)+len(order))
	copy(out, local)
	gateways := make(map[*mesh.Endpoint]bool, len(order))
	for _, k := range order {
		w := weights[k]
		if w == 0 {
			w = 1
		}
		ep := &mesh.Endpoint{Address: k.gw.Address, Ports: map[string]uint32{oc.Port.Name: k.gw.Port}, Locality: k.locality,
			Network: k.gw.Network, Weight: w, Health: mesh.Healthy, Cluster: k.gw.Cluster, Source: k.gw.Source,
			Labels: gatewayLabels}
		gateways[ep] = true
		out = append(out, ep)
	}
	return out, gateways
}

// gatewayLabels are the labels of a gateway endpoint (what
// failoverPriority and subsets read of it; the subset was chosen among
// the endpoints it stands for).
var gatewayLabels = map[string]string{tlsModeLabel: tlsModeIstio}

// crossNetworkMTLS returns whether the cluster reaches a remote endpoint
// with mesh mTLS (Istio's rule for split horizon): the DestinationRule's
// TLS mode when it sets one (ISTIO_MUTUAL only), else auto mTLS (cds_tls.go)
// applies to the cluster and the endpoint accepts mesh mTLS (tlsMode
// istio, not DISABLEd by its PeerAuthentication).
func (b *edsBuilder) crossNetworkMTLS(oc *outboundCluster) func(*mesh.Endpoint) bool {
	if tls := oc.Policy.GetTls(); tls != nil {
		ok := tls.GetMode() == networking.ClientTLSSettings_ISTIO_MUTUAL
		return func(*mesh.Endpoint) bool { return ok }
	}
	snap := b.v.Snapshot()
	if oc.Service.External || oc.kind == kindOriginalDst || !snap.AutoMTLS() {
		return func(*mesh.Endpoint) bool { return false }
	}
	if mode, _ := policy.EffectiveMTLS(snap, oc.Service.Namespace, nil, 0); mode == policy.MTLSDisable {
		return func(*mesh.Endpoint) bool { return false }
	}
	return func(ep *mesh.Endpoint) bool {
		md := b.tlsModeMetadata(oc.Service, ep, ep.PortFor(oc.Port))
		return md.GetFilterMetadata()[transportSocketMatchKey].GetFields()["tlsMode"].GetStringValue() == tlsModeIstio
	}
}

// gatewayMetadata is a gateway endpoint's metadata: tlsMode istio, so
// that auto mTLS picks the cluster's mesh mTLS transport socket.
func (b *edsBuilder) gatewayMetadata() *corev3.Metadata {
	if b.istioMeta == nil {
		b.istioMeta = tlsModeMeta(tlsModeIstio)
	}
	return b.istioMeta
}

// scaleWeight is an endpoint weight (0 means 1) times scale, clipped at
// the largest weight.
func scaleWeight(w, scale uint32) uint32 {
	if w == 0 {
		w = 1
	}
	if w > math.MaxUint32/scale {
		return math.MaxUint32
	}
	return w * scale
}

func addWeight(a, b uint32) uint32 {
	if a > math.MaxUint32-b {
		return math.MaxUint32
	}
	return a + b
}
