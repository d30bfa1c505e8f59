package scope

import (
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// LocalityOf is the locality proxy k balances from, as Istio decides it:
// the registry's locality of the workload at k's addresses (the locality
// its endpoints carry: the node's topology labels, or its pod's
// istio-locality label), else k's istio-locality label, else the
// locality its node states (bootstrap node.locality). Injected sidecars
// and agents write no locality into their bootstrap — a pod does not know
// its node's zone — so without the registry they would balance as if
// they were nowhere. Endpoints at k's addresses in another network than
// k's are not considered; when the endpoints at its addresses disagree
// (overlapping pod addresses in two clusters), the registry gives none.
func LocalityOf(s *mesh.Snapshot, k proxy.Key) mesh.Locality {
	var (
		found mesh.Locality
		seen  bool
	)
	for _, ip := range k.IPList() {
		for _, svc := range s.ServicesAt(ip) {
			for _, ep := range svc.Endpoints {
				if ep.Address != ip || ep.Locality == (mesh.Locality{}) {
					continue
				}
				if s.OtherNetwork(ep, k.Network) {
					continue
				}
				if seen && ep.Locality != found {
					return fallbackLocality(k) // ambiguous: trust what the proxy says
				}
				found, seen = ep.Locality, true
			}
		}
	}
	if seen {
		return found
	}
	return fallbackLocality(k)
}

func fallbackLocality(k proxy.Key) mesh.Locality {
	if v := k.LabelMap()[meshconfig.LocalityLabel]; v != "" {
		region, zone, subzone := meshconfig.ParseLocalityLabel(v)
		return mesh.Locality{Region: region, Zone: zone, Subzone: subzone}
	}
	return k.Locality
}
