package kube

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Labels the source reads from nodes, pods and namespaces.
const (
	labelRegion  = "topology.kubernetes.io/region"
	labelZone    = "topology.kubernetes.io/zone"
	labelSubzone = "topology.istio.io/subzone"
)

// lastApplied is kubectl's copy of the whole applied object: large, and
// never read.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// The transforms below run before an object enters an informer's cache.
// They keep only what the source reads, so a large cluster costs little
// memory. Each is idempotent (client-go may apply one twice) and passes
// through objects of other types (such as a DeletedFinalStateUnknown).

// trimMeta drops managed fields and kubectl's last-applied annotation.
func trimMeta(m metav1.Object) {
	m.SetManagedFields(nil)
	if a := m.GetAnnotations(); a != nil {
		if _, ok := a[lastApplied]; ok {
			a = maps.Clone(a)
			delete(a, lastApplied)
			m.SetAnnotations(a)
		}
	}
}

// transformMeta trims any object's metadata.
func transformMeta(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		trimMeta(m)
	}
	return obj, nil
}

// transformService trims metadata and keeps of the status only the load
// balancer ingress addresses (IP and hostname), which become the
// service's external addresses.
func transformService(obj any) (any, error) {
	if svc, ok := obj.(*corev1.Service); ok {
		trimMeta(svc)
		var ingress []corev1.LoadBalancerIngress
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if in.IP != "" || in.Hostname != "" {
				ingress = append(ingress, corev1.LoadBalancerIngress{IP: in.IP, Hostname: in.Hostname})
			}
		}
		svc.Status = corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: ingress}}
	}
	return obj, nil
}

// pod is what the source keeps of a Pod: its name, namespace, uid,
// resource version, labels and deletion timestamp, service account, node
// and the status of its Ready condition. A corev1.Pod is 1,240 bytes
// before its strings, maps and container specs, a metav1.ObjectMeta alone
// 232; this is 144, and a large cluster's informer memory is mostly its
// pods. Its labels are a set shared with the pods that carry the same
// (labelSets), and the names pods repeat (namespace, service account,
// node) are interned. client-go's caches read its metadata through
// GetObjectMeta.
type pod struct {
	name, namespace string
	uid             types.UID
	resourceVersion string
	labels          map[string]string // labelSet's: never modified
	// labelSet holds labels' map in the shared table; nil without labels.
	labelSet       *labelSet
	deletion       *metav1.Time // the deletion timestamp
	serviceAccount string
	node           string
	ready          corev1.ConditionStatus // "" without a Ready condition
}

// GetObjectMeta returns a copy of the pod's metadata (meta.Accessor's
// way to the name, namespace and version of an object that is not a
// metav1.Object), made at each call: client-go asks at each event.
func (p *pod) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: p.name, Namespace: p.namespace, UID: p.uid, ResourceVersion: p.resourceVersion,
		Labels: p.labels, DeletionTimestamp: p.deletion}
}

// transformPod returns the transform that turns a Pod into a pod, its
// labels shared through sets.
func transformPod(sets *labelSets) func(obj any) (any, error) {
	return func(obj any) (any, error) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return obj, nil
		}
		out := &pod{
			name:            p.Name,
			namespace:       intern(p.Namespace),
			uid:             p.UID,
			resourceVersion: p.ResourceVersion,
			labelSet:        sets.share(p.Labels),
			deletion:        p.DeletionTimestamp,
			serviceAccount:  intern(p.Spec.ServiceAccountName),
			node:            intern(p.Spec.NodeName),
		}
		if out.labelSet != nil {
			out.labels = out.labelSet.labels
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				out.ready = c.Status
				break
			}
		}
		return out, nil
	}
}

// samePod reports whether two transformed pods hold the same content.
func samePod(old, cur any) bool {
	a, ok1 := old.(*pod)
	b, ok2 := cur.(*pod)
	if !ok1 || !ok2 {
		return false
	}
	return a.uid == b.uid &&
		maps.Equal(a.labels, b.labels) &&
		a.deletion.Equal(b.deletion) &&
		a.serviceAccount == b.serviceAccount &&
		a.node == b.node &&
		a.ready == b.ready
}

// endpointSlice is what the source keeps of an EndpointSlice: its name,
// namespace, uid, resource version and labels, its address type, its TCP
// ports by name and, of each endpoint with an address, what
// workloadEndpoints reads. A discoveryv1.Endpoint is ~300 bytes with its
// pointers and target reference; a cachedEndpoint is a third of that, and
// a large cluster has an endpoint per pod.
type endpointSlice struct {
	metav1.ObjectMeta
	addressType discoveryv1.AddressType
	// ports are the slice's TCP ports by name (slicePorts), shared by the
	// endpoints (and Workloads) made of it: never modified.
	ports     map[string]uint32
	endpoints []cachedEndpoint
}

// cachedEndpoint is one endpoint of an endpointSlice.
type cachedEndpoint struct {
	// address is the endpoint's first address: only the first has
	// defined semantics.
	address string
	// podRef is set when the endpoint's targetRef is a Pod of the
	// slice's namespace; pod is its name.
	podRef         bool
	pod            string
	nodeName, zone string
	ready          condition
	terminating    condition
}

// condition is an endpoint condition, which the API leaves unset when
// unknown.
type condition int8

const (
	conditionUnset condition = iota
	conditionTrue
	conditionFalse
)

func conditionOf(b *bool) condition {
	switch {
	case b == nil:
		return conditionUnset
	case *b:
		return conditionTrue
	}
	return conditionFalse
}

// transformEndpointSlice turns an EndpointSlice into an endpointSlice.
func transformEndpointSlice(obj any) (any, error) {
	if sl, ok := obj.(*discoveryv1.EndpointSlice); ok {
		return compactSlice(sl), nil
	}
	return obj, nil
}

// compactSlice keeps what the source reads of sl.
func compactSlice(sl *discoveryv1.EndpointSlice) *endpointSlice {
	out := &endpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:            sl.Name,
			Namespace:       intern(sl.Namespace),
			UID:             sl.UID,
			ResourceVersion: sl.ResourceVersion,
			Labels:          sl.Labels,
		},
		addressType: sl.AddressType,
		ports:       slicePorts(sl),
	}
	for _, ep := range sl.Endpoints {
		if len(ep.Addresses) == 0 {
			continue
		}
		e := cachedEndpoint{address: ep.Addresses[0], ready: conditionOf(ep.Conditions.Ready), terminating: conditionOf(ep.Conditions.Terminating)}
		if ref := ep.TargetRef; ref != nil && ref.Kind == "Pod" && (ref.Namespace == "" || ref.Namespace == sl.Namespace) {
			e.podRef, e.pod = true, ref.Name
		}
		if ep.NodeName != nil {
			e.nodeName = intern(*ep.NodeName)
		}
		if ep.Zone != nil {
			e.zone = intern(*ep.Zone)
		}
		out.endpoints = append(out.endpoints, e)
	}
	return out
}

// transformNode keeps a node's name and topology labels.
func transformNode(obj any) (any, error) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	out := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:            node.Name,
		UID:             node.UID,
		ResourceVersion: node.ResourceVersion,
	}}
	for _, k := range []string{labelRegion, labelZone, labelSubzone} {
		if v, ok := node.Labels[k]; ok {
			if out.Labels == nil {
				out.Labels = map[string]string{}
			}
			out.Labels[k] = v
		}
	}
	return out, nil
}

// sameNode reports whether two transformed nodes have the same topology.
func sameNode(old, cur any) bool {
	a, ok1 := old.(*corev1.Node)
	b, ok2 := cur.(*corev1.Node)
	return ok1 && ok2 && maps.Equal(a.Labels, b.Labels)
}

// transformNamespace keeps a namespace's name and labels.
func transformNamespace(obj any) (any, error) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return obj, nil
	}
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:            ns.Name,
		UID:             ns.UID,
		ResourceVersion: ns.ResourceVersion,
		Labels:          ns.Labels,
	}}, nil
}

// sameNamespace reports whether two transformed namespaces have the same labels.
func sameNamespace(old, cur any) bool {
	a, ok1 := old.(*corev1.Namespace)
	b, ok2 := cur.(*corev1.Namespace)
	return ok1 && ok2 && maps.Equal(a.Labels, b.Labels)
}
