package meshconfig

import (
	"fmt"
	"slices"
	"strings"

	networkingv1alpha3 "istio.io/api/networking/v1alpha3"

	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
)

// Warning is something valid but suspicious about an object: the object
// is accepted, and the warning is reported to whoever wrote it (the
// admission webhook's warnings). Field is a path like
// spec.http[0].route[0].destination.subset. A plain value.
type Warning struct {
	Field  string
	Reason string
}

// String formats the warning as "field: reason".
func (w Warning) String() string { return w.Field + ": " + w.Reason }

// DestinationRules indexes a cluster's DestinationRules by the host they
// apply to, resolved with the cluster's domain suffix, the way the hub
// looks them up (the exact host). Immutable once built: safe for
// concurrent use.
type DestinationRules struct {
	suffix string
	byHost map[string][]destinationRule
}

type destinationRule struct {
	ref     Ref
	subsets []string
}

// IndexDestinationRules indexes the DestinationRules among objs, whose
// short host names are completed with suffix (ResolveHost).
func IndexDestinationRules(objs []*Object, suffix string) *DestinationRules {
	idx := &DestinationRules{suffix: suffix, byHost: map[string][]destinationRule{}}
	for _, o := range objs {
		dr, ok := o.Spec.(*networkingv1alpha3.DestinationRule)
		if !ok {
			continue
		}
		e := destinationRule{ref: o.Ref()}
		for _, s := range dr.GetSubsets() {
			e.subsets = append(e.subsets, s.GetName())
		}
		host := ResolveHost(dr.GetHost(), o.Namespace, suffix)
		idx.byHost[host] = append(idx.byHost[host], e)
	}
	return idx
}

// Len is the number of hosts that have DestinationRules.
func (d *DestinationRules) Len() int { return len(d.byHost) }

// maxWarnings bounds what one object gets: an API server shows each one.
const maxWarnings = 10

// Warnings lists what is valid but suspicious in o, which has passed
// Validate: for a VirtualService, every route, mirror and TCP or TLS route
// to a subset that no DestinationRule of drs defines for the
// destination's host (the hub would send that traffic nowhere). drs holds
// one cluster's rules, so a rule defined only in another cluster of the
// mesh is not seen: that is why this is a warning. Warnings name other
// DestinationRules and their subsets only in o's namespace. At most 10
// warnings.
//
// For a ServiceEntry or a registry Service (a Kubernetes Service), every
// port without a protocol (for a Service: no name prefix or appProtocol
// Istio knows) is warned about: sidecars sniff it, which is right for
// HTTP and client-first TCP, and makes a server-first protocol wait for
// MeshConfig protocolDetectionTimeout (no limit by default).
func Warnings(o *Object, drs *DestinationRules) []Warning {
	switch spec := o.Spec.(type) {
	case *networkingv1alpha3.ServiceEntry:
		return undeclaredProtocols(len(spec.GetPorts()), func(i int) (string, uint32, string) {
			return spec.GetPorts()[i].GetProtocol(), spec.GetPorts()[i].GetNumber(), "protocol"
		})
	case *meshconfigv1.Service:
		return undeclaredProtocols(len(spec.GetPorts()), func(i int) (string, uint32, string) {
			return spec.GetPorts()[i].GetProtocol(), spec.GetPorts()[i].GetNumber(), "name"
		})
	}
	vs, ok := o.Spec.(*networkingv1alpha3.VirtualService)
	if !ok || drs == nil {
		return nil
	}
	var out []Warning
	check := func(p path, d *networkingv1alpha3.Destination) {
		if d.GetSubset() == "" || len(out) >= maxWarnings {
			return
		}
		if w, bad := drs.subsetWarning(p.field("subset"), o.Namespace, ResolveHost(d.GetHost(), o.Namespace, drs.suffix), d.GetSubset()); bad {
			out = append(out, w)
		}
	}
	spec := path("spec")
	for i, r := range vs.GetHttp() {
		rp := spec.field("http").index(i)
		for j, d := range r.GetRoute() {
			check(rp.field("route").index(j).field("destination"), d.GetDestination())
		}
		check(rp.field("mirror"), r.GetMirror())
		for j, m := range r.GetMirrors() {
			check(rp.field("mirrors").index(j).field("destination"), m.GetDestination())
		}
	}
	for i, r := range vs.GetTls() {
		for j, d := range r.GetRoute() {
			check(spec.field("tls").index(i).field("route").index(j).field("destination"), d.GetDestination())
		}
	}
	for i, r := range vs.GetTcp() {
		for j, d := range r.GetRoute() {
			check(spec.field("tcp").index(i).field("route").index(j).field("destination"), d.GetDestination())
		}
	}
	return out
}

// undeclaredProtocols warns about the ports (n of them; port(i) gives the
// i-th's protocol, number and the field that declares it) without a
// protocol.
func undeclaredProtocols(n int, port func(i int) (string, uint32, string)) []Warning {
	var out []Warning
	for i := 0; i < n && len(out) < maxWarnings; i++ {
		proto, number, field := port(i)
		if proto != "" {
			continue
		}
		out = append(out, Warning{
			Field: string(path("spec").field("ports").index(i).field(field)),
			Reason: fmt.Sprintf("port %d declares no protocol: sidecars sniff it (HTTP is detected, anything else is TCP); "+
				"a server-first protocol (MySQL, SMTP, ...) waits for MeshConfig protocolDetectionTimeout, so declare it (name prefix tcp-, or appProtocol)", number),
		})
	}
	return out
}

// subsetWarning says why subset of host, named by config in namespace
// ns, is suspicious, if it is. It names DestinationRules and their
// subsets only in ns: whoever may send the object may not read other
// namespaces' config.
func (d *DestinationRules) subsetWarning(p path, ns, host, subset string) (Warning, bool) {
	rules := d.byHost[host]
	if len(rules) == 0 {
		return Warning{Field: string(p), Reason: shorten(fmt.Sprintf(
			"no DestinationRule in this cluster is for host %s, so subset %q is not defined", host, subset))}, true
	}
	var names, defined []string
	elsewhere := 0
	for _, r := range rules {
		if slices.Contains(r.subsets, subset) {
			return Warning{}, false
		}
		if r.ref.Namespace != ns {
			elsewhere++
			continue
		}
		names = append(names, r.ref.Namespace+"/"+r.ref.Name)
		defined = append(defined, r.subsets...)
	}
	slices.Sort(defined)
	defined = slices.Compact(defined)
	var detail []string
	if len(names) > 0 {
		has := "no subsets"
		if len(defined) > 0 {
			has = "subsets " + strings.Join(defined, ", ")
		}
		detail = append(detail, strings.Join(names, ", ")+": "+has)
	}
	if elsewhere > 0 {
		detail = append(detail, fmt.Sprintf("%d in other namespaces", elsewhere))
	}
	return Warning{Field: string(p), Reason: shorten(fmt.Sprintf(
		"subset %q is not defined by the DestinationRules of %s in this cluster (%s)",
		subset, host, strings.Join(detail, "; ")))}, true
}
