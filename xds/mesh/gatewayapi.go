package mesh

import (
	"slices"
	"strings"

	"github.com/navemesh/nave/xds/gatewayapi"
)

// translateGatewayAPI translates the Gateway API objects of the mesh
// (every cluster's definitions of each, the winner of the merge first)
// into Istio VirtualServices and Gateways, and records their statuses and
// problems in s. s's services must be complete.
//
// The merge rule is the one of every config kind: an object defined
// differently in several clusters is the oldest definition, then the one
// of the lexically smallest cluster (resolveConflicts); each cluster's
// definition gets a status, a losing one Accepted=False, reason
// Conflicted.
func (b *Builder) translateGatewayAPI(s *Snapshot, candidates map[configKey][]*Config) (vss, gateways []*Config) {
	var defs []gatewayapi.Definition
	for _, list := range candidates {
		if !list[0].Object.Kind.GatewayAPI {
			continue
		}
		w := list[0]
		for _, c := range list {
			d := gatewayapi.Definition{Cluster: c.Cluster, Object: c.Object}
			if c != w && c.Object.Version != w.Object.Version {
				d.LostTo = w.Cluster
			}
			defs = append(defs, d)
		}
	}
	if len(defs) == 0 {
		b.gatewayAPI = gatewayapi.Translator{} // nothing to remember
		return nil, nil
	}
	// The translator groups definitions by object in input order.
	slices.SortStableFunc(defs, func(a, c gatewayapi.Definition) int {
		if a.Object.Kind.Kind != c.Object.Kind.Kind {
			return strings.Compare(a.Object.Kind.Kind, c.Object.Kind.Kind)
		}
		return strings.Compare(a.Object.Key(), c.Object.Key())
	})
	res := b.gatewayAPI.Translate(gatewayapi.Input{
		Definitions: defs,
		Service: func(host string) (gatewayapi.Service, bool) {
			svc := s.Services[host]
			if svc == nil {
				return gatewayapi.Service{}, false
			}
			out := gatewayapi.Service{Namespace: svc.Namespace}
			for _, p := range svc.Ports {
				out.Ports = append(out.Ports, gatewayapi.Port{Number: p.Number, Name: p.Name, Protocol: p.Protocol})
			}
			return out, true
		},
		DomainSuffix: s.DomainSuffix,
	})
	for _, g := range res.Gateways {
		gateways = append(gateways, &Config{Cluster: g.Cluster, Object: g.Object})
	}
	// Consumer routes (exported to their namespace only) come first for
	// their host, so a sidecar of that namespace uses them.
	var consumers, producers []*Config
	for _, g := range res.VirtualServices {
		c := &Config{Cluster: g.Cluster, Object: g.Object}
		if exp := c.VirtualService().GetExportTo(); len(exp) == 1 && exp[0] == "." {
			consumers = append(consumers, c)
		} else {
			producers = append(producers, c)
		}
	}
	for _, p := range res.Problems {
		s.Problems = append(s.Problems, Problem{Resource: p.Resource, Field: p.Field, Reason: p.Reason})
	}
	if len(res.Statuses) > 0 {
		s.GatewayAPIStatuses = res.Statuses
	}
	return append(consumers, producers...), gateways
}
