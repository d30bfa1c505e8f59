package analyze

import (
	"fmt"
	"slices"
	"strings"

	networkingv1alpha3 "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/xds/gen"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// envoyFilterChecks generates, for each EnvoyFilter, the config of a
// sidecar it selects (in its namespace, with its selector's labels) and,
// when a patch names the GATEWAY context, of a gateway, and reports each
// patch that fails on what the generators built (as the hub reports it
// pushing to such a proxy). Proxies have no inbound ports here.
func (a *Analysis) envoyFilterChecks(snap *mesh.Snapshot, byRef map[string]*findingPlace) {
	for _, c := range snap.EnvoyFilters {
		ef, _ := c.Object.Spec.(*networkingv1alpha3.EnvoyFilter)
		var labels []string
		for k, v := range ef.GetWorkloadSelector().GetLabels() {
			labels = append(labels, k+"="+v)
		}
		slices.Sort(labels)
		types := []proxy.Type{proxy.Sidecar}
		if slices.ContainsFunc(ef.GetConfigPatches(), func(cp *networkingv1alpha3.EnvoyFilter_EnvoyConfigObjectPatch) bool {
			return cp.GetMatch().GetContext() == networkingv1alpha3.EnvoyFilter_GATEWAY
		}) {
			types = append(types, proxy.Router)
		}
		seen := map[mesh.Problem]bool{}
		for _, typ := range types {
			k := proxy.Key{Type: typ, Mesh: snap.Mesh, Namespace: c.Object.Namespace, Labels: strings.Join(labels, "\n")}
			for _, p := range gen.Envoy(snap, k).Problems {
				if p.Resource != c.Ref() || seen[p] {
					continue
				}
				seen[p] = true
				f := Finding{Severity: SevError, Check: "envoyfilter", Object: p.Resource, Field: p.Field,
					Message: fmt.Sprintf("%s (generating for a %s it selects)", p.Reason, typ)}
				if pl := byRef[p.Resource]; pl != nil {
					f.Cluster, f.Where, f.Object = pl.cluster, pl.where, pl.object
				}
				a.Findings = append(a.Findings, f)
			}
		}
	}
}

// findingPlace is where an object of the inputs is: its cluster, file
// and name, for findings about it.
type findingPlace struct{ cluster, where, object string }
