package patch

import (
	"slices"
	"strconv"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/proxy"
)

// clusterContext is the patch context of a cluster of the set's proxy:
// GATEWAY for a router; a sidecar's inbound clusters (and the inbound
// passthrough) are SIDECAR_INBOUND, the rest SIDECAR_OUTBOUND.
func (s *Set) clusterContext(name string) context {
	switch {
	case s.typ == proxy.Router:
		return networking.EnvoyFilter_GATEWAY
	case strings.HasPrefix(name, "inbound|") || name == build.InboundPassthroughCluster:
		return networking.EnvoyFilter_SIDECAR_INBOUND
	}
	return networking.EnvoyFilter_SIDECAR_OUTBOUND
}

// clusters patches a proxy's clusters (REMOVE, MERGE), then adds the ADDed
// ones (an ADD with no context adds to a sidecar's outbound side and to
// gateways, as in Istio).
func (s *Set) clusters(rs []build.Resource) []build.Resource {
	patches := s.by[networking.EnvoyFilter_CLUSTER]
	if len(patches) == 0 {
		return rs
	}
	out := make([]build.Resource, 0, len(rs))
	for _, r := range rs {
		ctx := s.clusterContext(r.Name)
		touched := slices.ContainsFunc(patches, func(p *Patch) bool {
			return p.op != networking.EnvoyFilter_Patch_ADD && p.inContext(ctx) && clusterMatch(p, r.Name)
		})
		if !touched {
			out = append(out, r)
			continue
		}
		// The copy shares the generated cluster's fields: patchCluster
		// replaces what it changes (mergeShared).
		if pr, keep := s.guard("cluster", []applyTo{networking.EnvoyFilter_CLUSTER}, r, shallowClone, func(m proto.Message) (proto.Message, bool) {
			return m, s.patchCluster(ctx, m.(*clusterv3.Cluster))
		}); keep {
			out = append(out, pr)
		}
	}
	ctxs := []context{networking.EnvoyFilter_SIDECAR_OUTBOUND, networking.EnvoyFilter_SIDECAR_INBOUND}
	if s.typ == proxy.Router {
		ctxs = []context{networking.EnvoyFilter_GATEWAY}
	}
	for _, ctx := range ctxs {
		for _, p := range patches {
			if p.op != networking.EnvoyFilter_Patch_ADD || !p.inContext(ctx) ||
				(p.ctx() == networking.EnvoyFilter_ANY && ctx == networking.EnvoyFilter_SIDECAR_INBOUND) {
				continue
			}
			c := cloneValue[*clusterv3.Cluster](p)
			if slices.ContainsFunc(out, func(r build.Resource) bool { return r.Name == c.GetName() }) {
				s.fail(p, "clusters", "a cluster named %q exists already", c.GetName())
				continue
			}
			out = append(out, build.Resource{Name: c.GetName(), Message: c})
		}
	}
	build.SortByName(out)
	return out
}

// patchCluster applies the REMOVE and MERGE patches to c (a shallow copy
// of the generated cluster: its fields are replaced, never changed in
// place), reporting whether it is kept.
func (s *Set) patchCluster(ctx context, c *clusterv3.Cluster) bool {
	for _, p := range s.by[networking.EnvoyFilter_CLUSTER] {
		if !p.inContext(ctx) || !clusterMatch(p, c.GetName()) {
			continue
		}
		switch p.op {
		case networking.EnvoyFilter_Patch_REMOVE:
			return false
		case networking.EnvoyFilter_Patch_MERGE:
			v := p.value.(*clusterv3.Cluster)
			if len(v.GetTransportSocketMatches()) > 0 && len(c.GetTransportSocketMatches()) > 0 {
				// Istio appends them after its match-all tlsMode-disabled
				// match, where Envoy never reaches them; ours has no such
				// match (decision 055), so appending would change which
				// socket plain-text endpoints get.
				s.fail(p, "cluster "+c.GetName(), "the cluster selects its transport socket per endpoint (auto-mTLS); transport_socket_matches cannot be merged into it")
				continue
			}
			if ts := v.GetTransportSocket(); ts != nil {
				if len(c.GetTransportSocketMatches()) > 0 {
					s.fail(p, "cluster "+c.GetName(), "the cluster selects its transport socket per endpoint (transport_socket_matches); a transport_socket cannot be merged into it")
					continue
				}
				merged, err := mergeTransportSocket(c.GetTransportSocket(), ts)
				if err != nil {
					s.fail(p, "cluster "+c.GetName(), "%v", err)
					continue
				}
				c.TransportSocket = merged
				v = proto.Clone(v).(*clusterv3.Cluster)
				v.TransportSocket = nil
			}
			mergeShared(c, v)
		}
	}
	return true
}

// clusterMatch: by name, or by the service, port and subset of its name
// ("outbound|PORT|SUBSET|HOST"; an inbound cluster has a port only).
func clusterMatch(p *Patch, name string) bool {
	m := p.match.GetCluster()
	if m == nil {
		return true
	}
	if m.GetName() != "" {
		return m.GetName() == name
	}
	parts := strings.Split(name, "|")
	if len(parts) != 4 {
		return m.GetService() == "" && m.GetSubset() == "" && m.GetPortNumber() == 0
	}
	port, _ := strconv.Atoi(parts[1])
	return (m.GetSubset() == "" || m.GetSubset() == parts[2]) &&
		(m.GetService() == "" || m.GetService() == parts[3]) &&
		(m.GetPortNumber() == 0 || uint32(port) == m.GetPortNumber())
}
