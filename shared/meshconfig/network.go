package meshconfig

import (
	"google.golang.org/protobuf/proto"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
)

// WithNetwork gives the workloads of a WorkloadEntry or of a
// ServiceEntry's endpoints that name no network one, as Istio resolves
// it: the entry's network field, else its topology.istio.io/network
// label (an endpoint's labels; a WorkloadEntry's spec labels, then its
// metadata labels), else fallback (what the spoke knows: the namespace's
// label, the cluster's network; "" for none). It returns o itself when
// nothing changes, else a copy with its version computed again; o is
// never modified.
func WithNetwork(o *Object, fallback string) *Object {
	if o == nil {
		return o
	}
	switch spec := o.Spec.(type) {
	case *networkingv1alpha3.WorkloadEntry:
		nw := entryNetwork(spec, o.Labels, fallback)
		if nw == "" {
			return o
		}
		c := *o
		we := proto.Clone(spec).(*networkingv1alpha3.WorkloadEntry)
		we.Network = nw
		c.Spec = we
		c.Version = c.ComputeVersion()
		return &c
	case *networkingv1alpha3.ServiceEntry:
		var se *networkingv1alpha3.ServiceEntry
		for i, ep := range spec.GetEndpoints() {
			nw := entryNetwork(ep, nil, fallback)
			if nw == "" {
				continue
			}
			if se == nil {
				se = proto.Clone(spec).(*networkingv1alpha3.ServiceEntry)
			}
			se.Endpoints[i].Network = nw
		}
		if se == nil {
			return o
		}
		c := *o
		c.Spec = se
		c.Version = c.ComputeVersion()
		return &c
	}
	return o
}

// entryNetwork is the network an entry without one takes ("" when it has
// one): its labels' (then meta's) topology.istio.io/network, else
// fallback.
func entryNetwork(we *networkingv1alpha3.WorkloadEntry, meta map[string]string, fallback string) string {
	switch {
	case we.GetNetwork() != "":
		return ""
	case we.GetLabels()[NetworkLabel] != "":
		return we.GetLabels()[NetworkLabel]
	case meta[NetworkLabel] != "":
		return meta[NetworkLabel]
	}
	return fallback
}
