package kube

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/navemesh/nave/shared/meshconfig"
	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
)

// view is what a build reads from the informer caches besides the
// objects it normalizes. It is read-only during a build.
type view struct {
	domain     string
	network    string                       // the cluster's (Options.Network)
	namespaces map[string]*corev1.Namespace // by name
	nodes      map[string]*corev1.Node      // by name
	// pods finds a pod of a selected namespace (nil: no pods). It reads
	// the informer's cache, which is keyed so, rather than a copy of it.
	pods func(namespace, name string) *pod
	// localities holds the build's Workload localities, one per
	// distinct region, zone and subzone, shared by the Workloads in it
	// (never modified).
	localities map[[3]string]*meshconfigv1.Locality
}

// locality returns the shared locality of region, zone and subzone; nil
// when all three are empty.
func (v *view) locality(region, zone, subzone string) *meshconfigv1.Locality {
	if region == "" && zone == "" && subzone == "" {
		return nil
	}
	k := [3]string{region, zone, subzone}
	if loc := v.localities[k]; loc != nil {
		return loc
	}
	loc := &meshconfigv1.Locality{Region: region, Zone: zone, Subzone: subzone}
	if v.localities == nil {
		v.localities = map[[3]string]*meshconfigv1.Locality{}
	}
	v.localities[k] = loc
	return loc
}

// pod returns the pod namespace/name, nil if there is none.
func (v *view) pod(namespace, name string) *pod {
	if v.pods == nil {
		return nil
	}
	return v.pods(namespace, name)
}

// namespaceNetwork is the network of a namespace's workloads that say
// none themselves: the namespace's topology.istio.io/network label, else
// the cluster's network.
func (v *view) namespaceNetwork(namespace string) string {
	if ns := v.namespaces[namespace]; ns != nil && ns.Labels[meshconfig.NetworkLabel] != "" {
		return ns.Labels[meshconfig.NetworkLabel]
	}
	return v.network
}

// endpoint gathers what the EndpointSlices of one namespace say about
// one address.
type endpoint struct {
	namespace, address string
	slice              string // the first slice (by name) that lists it
	pod                *pod
	podName            string // from a targetRef of kind Pod
	nodeName, zone     string
	ports              map[string]uint32
	services           []string
	health             meshconfigv1.Workload_Health
}

// workloadObjects normalizes EndpointSlices (and the pods and nodes
// behind their endpoints) into registry Workloads: one per pod and
// address, and one per address per namespace for endpoints of no pod,
// named after its pod, else "<slice>-<address>"; names that
// would collide get the address appended. FQDN slices and slices that
// belong to no Service are skipped. Versions are not set.
func workloadObjects(v *view, eps []*discoveryv1.EndpointSlice) []*meshconfig.Object {
	cached := make([]*endpointSlice, len(eps))
	for i, sl := range eps {
		cached[i] = compactSlice(sl)
	}
	all, names := workloadEndpoints(v, cached)
	out := make([]*meshconfig.Object, 0, len(all))
	for i, e := range all {
		out = append(out, workloadObject(v, e, names[i]))
	}
	return out
}

// workloadEndpoints gathers the endpoints workloadObjects makes Workloads
// of, and their names, from the cached slices.
func workloadEndpoints(v *view, eps []*endpointSlice) ([]*endpoint, []string) {
	eps = slices.Clone(eps)
	slices.SortFunc(eps, func(a, b *endpointSlice) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	// Endpoints are one per (pod, address): host-network pods share
	// their node's address and are still distinct workloads.
	type endpointKey struct {
		namespace, address, pod string
		podRef                  bool
	}
	n := 0
	for _, sl := range eps {
		n += len(sl.endpoints)
	}
	// Sized for them all: a map grown one endpoint at a time is several
	// times its size in garbage, at every build.
	byAddr := make(map[endpointKey]*endpoint, n)
	all := make([]*endpoint, 0, n)
	for _, sl := range eps {
		svc := sl.Labels[discoveryv1.LabelServiceName]
		if sl.addressType == discoveryv1.AddressTypeFQDN || svc == "" {
			continue
		}
		host := hostname(svc, sl.Namespace, v.domain)
		for _, ep := range sl.endpoints {
			key := endpointKey{namespace: sl.Namespace, address: ep.address, pod: ep.pod, podRef: ep.podRef}
			e := byAddr[key]
			if e == nil {
				// The endpoint shares its slice's ports (and so do the
				// Workloads made of it) until another slice adds one.
				e = &endpoint{namespace: sl.Namespace, address: ep.address, slice: sl.Name, ports: sl.ports}
				byAddr[key] = e
				all = append(all, e)
			} else {
				e.ports = mergePorts(e.ports, sl.ports)
			}
			var pod *pod
			if ep.podRef {
				pod = v.pod(sl.Namespace, ep.pod)
				if e.podName == "" {
					e.podName, e.pod = ep.pod, pod
				}
			}
			if e.nodeName == "" {
				e.nodeName = ep.nodeName
			}
			if e.zone == "" {
				e.zone = ep.zone
			}
			if !slices.Contains(e.services, host) {
				e.services = append(e.services, host)
			}
			// The enum orders READY < NOT_READY < TERMINATING: the worst wins.
			e.health = max(e.health, endpointHealth(ep, pod))
		}
	}
	for _, e := range all {
		slices.Sort(e.services)
	}
	return all, workloadNames(all)
}

// sameInputs reports whether e, named name, makes the Workload that old,
// named oldName, made in a build over the same view objects: the
// informers replace an object when it changes, so equal pointers mean
// equal content.
func (e *endpoint) sameInputs(v *view, old *endpoint, oldView *view) bool {
	return e.namespace == old.namespace && e.address == old.address && e.slice == old.slice && e.pod == old.pod &&
		e.podName == old.podName && e.nodeName == old.nodeName && e.zone == old.zone && e.health == old.health &&
		slices.Equal(e.services, old.services) && maps.Equal(e.ports, old.ports) &&
		v.nodes[e.node()] == oldView.nodes[old.node()] && v.namespaces[e.namespace] == oldView.namespaces[old.namespace]
}

// node is the name of the node the endpoint runs on: its slice's word,
// else its pod's.
func (e *endpoint) node() string {
	if e.nodeName == "" && e.pod != nil {
		return e.pod.node
	}
	return e.nodeName
}

// slicePorts returns a slice's TCP ports by name.
func slicePorts(sl *discoveryv1.EndpointSlice) map[string]uint32 {
	ports := map[string]uint32{}
	for _, p := range sl.Ports {
		if p.Port == nil || p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP {
			continue
		}
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		ports[name] = uint32(*p.Port)
	}
	return ports
}

// mergePorts returns have with the ports of more it lacks: have itself
// when it lacks none, else a copy (have may be shared).
func mergePorts(have, more map[string]uint32) map[string]uint32 {
	var out map[string]uint32
	for name, n := range more {
		if _, ok := have[name]; ok {
			continue
		}
		if out == nil {
			out = make(map[string]uint32, len(have)+len(more))
			maps.Copy(out, have)
		}
		out[name] = n
	}
	if out == nil {
		return have
	}
	return out
}

// endpointHealth reads an endpoint's conditions: terminating (or its pod
// being deleted) is TERMINATING, ready is READY, anything else
// NOT_READY. An endpoint that does not say whether it is ready takes its
// pod's Ready condition, and counts as ready without one, as the
// EndpointSlice API asks.
func endpointHealth(ep cachedEndpoint, pod *pod) meshconfigv1.Workload_Health {
	if ep.terminating == conditionTrue || pod != nil && pod.deletion != nil {
		return meshconfigv1.Workload_TERMINATING
	}
	ready := ep.ready != conditionFalse
	if ep.ready == conditionUnset && pod != nil {
		if pod.ready != "" {
			ready = pod.ready == corev1.ConditionTrue
		}
	}
	if ready {
		return meshconfigv1.Workload_READY
	}
	return meshconfigv1.Workload_NOT_READY
}

// workloadNames names each endpoint uniquely within its namespace.
func workloadNames(all []*endpoint) []string {
	// Keyed by namespace and name: no key is made of the two.
	type name struct{ namespace, name string }
	preferred := make([]string, len(all))
	count := make(map[name]int, len(all))
	for i, e := range all {
		if e.podName != "" {
			preferred[i] = e.podName
		} else {
			preferred[i] = e.slice + "-" + addressLabel(e.address)
		}
		count[name{e.namespace, preferred[i]}]++
	}
	if len(count) == len(all) {
		// No two preferred names collide: they are the names.
		return preferred
	}
	names := make([]string, len(all))
	used := make(map[name]bool, len(all))
	for i, e := range all {
		n := preferred[i]
		if count[name{e.namespace, n}] > 1 {
			n += "-" + addressLabel(e.address)
		}
		// Only a pod literally named like another's name-address can
		// still collide; number it.
		for k := 2; used[name{e.namespace, n}]; k++ {
			n = preferred[i] + "-" + addressLabel(e.address) + "-" + strconv.Itoa(k)
		}
		used[name{e.namespace, n}] = true
		names[i] = n
	}
	return names
}

// addressLabel makes an IP address usable in a name: "10.0.0.1" becomes
// "10-0-0-1", "fd00::1" becomes "fd00--1".
func addressLabel(addr string) string {
	s := strings.NewReplacer(".", "-", ":", "-").Replace(strings.ToLower(addr))
	return strings.Trim(s, "-")
}

func workloadObject(v *view, e *endpoint, name string) *meshconfig.Object {
	w := &meshconfigv1.Workload{
		Address: e.address,
		Health:  e.health,
	}
	if len(e.ports) > 0 {
		w.Ports = e.ports
	}
	w.Services = e.services
	o := &meshconfig.Object{Kind: workloadKind, Name: name, Namespace: e.namespace, Spec: w, Origin: origin}

	nodeName := e.node()
	if pod := e.pod; pod != nil {
		o.Labels = pod.labels
		w.ServiceAccount = pod.serviceAccount
		w.Network = pod.labels[meshconfig.NetworkLabel]
	}
	if w.Network == "" {
		w.Network = v.namespaceNetwork(e.namespace)
	}
	region, zone, subzone := "", e.zone, ""
	if node := v.nodes[nodeName]; node != nil {
		region = node.Labels[labelRegion]
		if z := node.Labels[labelZone]; z != "" {
			zone = z
		}
		subzone = node.Labels[labelSubzone]
	}
	if pod := e.pod; pod != nil && pod.labels[meshconfig.LocalityLabel] != "" {
		// The pod's istio-locality label wins over its node's, as in Istio.
		region, zone, subzone = meshconfig.ParseLocalityLabel(pod.labels[meshconfig.LocalityLabel])
	}
	w.Locality = v.locality(region, zone, subzone)
	return o
}
