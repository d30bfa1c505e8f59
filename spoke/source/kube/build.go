package kube

import (
	"cmp"
	"errors"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/navemesh/nave/shared/meshconfig"
)

// builder turns the informer caches into the object set. It belongs to
// Run's goroutine: it is not safe for concurrent use.
type builder struct {
	s *Source
	// converted caches the Istio objects by UID, keyed on their resource
	// version, so that an unchanged object is neither validated nor
	// hashed again.
	converted map[types.UID]converted
	// services and workloads remember the registry objects of the last
	// build with what they were made of, so that an unchanged Service or
	// Workload is neither validated nor hashed again: a build then costs
	// what changed, not the cluster's size.
	services  map[types.UID]serviceMemo
	workloads map[[2]string]workloadMemo // by namespace and name
	lastView  *view
	// reported holds the rejections already logged, so that each is
	// logged once, when it appears.
	reported map[string]string
}

type converted struct {
	resourceVersion string
	checkedObject   // the object (nil when rejected) or its rejection
	// networked is object with the network it takes when it names none
	// (meshconfig.WithNetwork), for the fallback network it was made with.
	networked       *meshconfig.Object
	networkFallback string
}

type serviceMemo struct {
	svc *corev1.Service
	checkedObject
}

type workloadMemo struct {
	e *endpoint
	checkedObject
}

// checkedObject is a checked object: the object with its version set, or
// its rejection.
type checkedObject struct {
	object    *meshconfig.Object
	rejection *meshconfig.Rejection
}

// buildResult is one build: the valid objects sorted by kind, namespace
// and name, the rejections by watched kind, cached objects in selected
// namespaces by watched kind, and invalid objects by config kind.
type buildResult struct {
	objects  []*meshconfig.Object
	rejected map[string][]meshconfig.Rejection
	counts   map[string]int
	invalid  map[string]int
}

func newBuilder(s *Source) *builder {
	return &builder{s: s, converted: map[types.UID]converted{}, services: map[types.UID]serviceMemo{},
		workloads: map[[2]string]workloadMemo{}, reported: map[string]string{}}
}

// build reads every started informer's cache and normalizes it.
func (b *builder) build() buildResult {
	s := b.s
	res := buildResult{rejected: map[string][]meshconfig.Rejection{}, counts: map[string]int{}, invalid: map[string]int{}}
	v := &view{
		domain:     s.opts.DomainSuffix,
		network:    s.opts.Network,
		namespaces: map[string]*corev1.Namespace{},
		nodes:      map[string]*corev1.Node{},
	}
	for _, item := range s.list(kindNamespace) {
		if ns, ok := item.(*corev1.Namespace); ok {
			v.namespaces[ns.Name] = ns
		}
	}
	selected := func(namespace string) bool {
		if s.selector == nil {
			return true
		}
		ns := v.namespaces[namespace]
		return ns != nil && s.selector.Matches(labels.Set(ns.Labels))
	}
	res.counts[kindNamespace] = len(v.namespaces)
	for _, item := range s.list(kindNode) {
		if n, ok := item.(*corev1.Node); ok {
			v.nodes[n.Name] = n
		}
	}
	res.counts[kindNode] = len(v.nodes)
	if pods := s.store(kindPod); pods != nil {
		v.pods = func(namespace, name string) *pod {
			if !selected(namespace) {
				return nil
			}
			item, _, _ := pods.GetByKey(namespace + "/" + name)
			p, _ := item.(*pod)
			return p
		}
		for _, item := range pods.List() {
			if p, ok := item.(*pod); ok && selected(p.namespace) {
				res.counts[kindPod]++
			}
		}
	}

	var objs []*meshconfig.Object
	services := make(map[types.UID]serviceMemo, len(b.services))
	for _, item := range s.list(kindService) {
		if svc, ok := item.(*corev1.Service); ok && selected(svc.Namespace) {
			res.counts[kindService]++
			m, ok := b.services[svc.UID]
			if !ok || m.svc != svc {
				m = serviceMemo{svc: svc, checkedObject: checked(serviceObject(svc, v.domain))}
			}
			services[svc.UID] = m
			objs = append(objs, m.record(&res, kindService))
		}
	}
	b.services = services
	var eps []*endpointSlice
	for _, item := range s.list(kindEndpointSlice) {
		if sl, ok := item.(*endpointSlice); ok && selected(sl.Namespace) {
			eps = append(eps, sl)
		}
	}
	res.counts[kindEndpointSlice] = len(eps)
	all, names := workloadEndpoints(v, eps)
	workloads := make(map[[2]string]workloadMemo, len(all))
	for i, e := range all {
		key := [2]string{e.namespace, names[i]}
		m, ok := b.workloads[key]
		if !ok || !e.sameInputs(v, m.e, b.lastView) {
			m = workloadMemo{e: e, checkedObject: checked(workloadObject(v, e, names[i]))}
		}
		workloads[key] = m
		objs = append(objs, m.record(&res, kindEndpointSlice))
	}
	b.workloads, b.lastView = workloads, v

	seen := map[types.UID]bool{}
	for _, w := range s.kinds {
		if w.def.mesh == nil && w.def.unsupported == "" {
			continue
		}
		for _, item := range s.list(w.def.name) {
			meta, ok := item.(metav1.Object)
			if !ok || (w.def.namespaced && !selected(meta.GetNamespace())) {
				continue
			}
			res.counts[w.def.name]++
			if w.def.unsupported != "" {
				res.rejected[w.def.name] = append(res.rejected[w.def.name], unsupportedRejection(w.def, meta))
				res.invalid[w.def.name]++
				continue
			}
			seen[meta.GetUID()] = true
			objs = append(objs, b.withNetwork(meta.GetUID(), b.config(&res, w.def, item, meta), v.namespaceNetwork(meta.GetNamespace())))
		}
	}
	for uid := range b.converted {
		if !seen[uid] {
			delete(b.converted, uid)
		}
	}

	objs = slices.DeleteFunc(objs, func(o *meshconfig.Object) bool { return o == nil })
	slices.SortFunc(objs, compareObjects)
	res.objects = objs
	b.logNewRejections(res.rejected)
	return res
}

// config converts an Istio or Gateway API object, through the cache.
func (b *builder) config(res *buildResult, def *kindDef, item any, meta metav1.Object) *meshconfig.Object {
	c, ok := b.converted[meta.GetUID()]
	if !ok || c.resourceVersion != meta.GetResourceVersion() || c.resourceVersion == "" {
		c = converted{resourceVersion: meta.GetResourceVersion()}
		c.object, c.rejection = configObject(def, item, meta)
		b.converted[meta.GetUID()] = c
	}
	return c.record(res, def.name)
}

// withNetwork gives WorkloadEntries and ServiceEntry endpoints without a
// network their label's, else fallback (their namespace's or the
// cluster's), through the cache: an object copied and hashed again only
// when it or fallback changed.
func (b *builder) withNetwork(uid types.UID, o *meshconfig.Object, fallback string) *meshconfig.Object {
	c, ok := b.converted[uid]
	if !ok || o == nil || c.object != o {
		return meshconfig.WithNetwork(o, fallback)
	}
	if c.networked == nil || c.networkFallback != fallback {
		c.networked, c.networkFallback = meshconfig.WithNetwork(o, fallback), fallback
		b.converted[uid] = c
	}
	return c.networked
}

// configObject converts and validates a cached Istio or Gateway API
// object: the object with its version set, or its rejection; neither
// for an item of another type.
func configObject(def *kindDef, item any, meta metav1.Object) (*meshconfig.Object, *meshconfig.Rejection) {
	o := &meshconfig.Object{
		Kind:         def.mesh,
		Name:         meta.GetName(),
		Namespace:    meta.GetNamespace(),
		Labels:       meta.GetLabels(),
		Annotations:  meta.GetAnnotations(),
		CreationTime: meta.GetCreationTimestamp().Time,
		Origin:       origin,
	}
	if def.mesh.ClusterScoped {
		o.Namespace = meshconfig.ClusterNamespace
	}
	spec, err := def.spec(item)
	switch {
	case err != nil:
		return nil, &meshconfig.Rejection{Kind: def.mesh.Kind, Namespace: o.Namespace, Name: o.Name, Field: "spec", Reason: err.Error()}
	case spec == nil:
		return nil, nil
	}
	o.Spec = spec
	return validated(o)
}

// checked validates and versions a registry object.
func checked(o *meshconfig.Object) checkedObject {
	o, rej := validated(o)
	return checkedObject{object: o, rejection: rej}
}

// record returns the checked object (nil if rejected), recording its
// rejection under the watched kind it came from.
func (m checkedObject) record(res *buildResult, watchedKind string) *meshconfig.Object {
	if rej := m.rejection; rej != nil {
		res.rejected[watchedKind] = append(res.rejected[watchedKind], *rej)
		res.invalid[rej.Kind]++
	}
	return m.object
}

// validated returns o with its version set, or its rejection.
func validated(o *meshconfig.Object) (*meshconfig.Object, *meshconfig.Rejection) {
	if err := meshconfig.Validate(o); err != nil {
		rej := &meshconfig.Rejection{Kind: o.Kind.Kind, Namespace: o.Namespace, Name: o.Name, Reason: err.Error()}
		var oerr *meshconfig.ObjectError
		if errors.As(err, &oerr) {
			rej.Field, rej.Reason = oerr.Field, oerr.Reason
		}
		return nil, rej
	}
	o.Version = o.ComputeVersion()
	return o, nil
}

// logNewRejections logs each rejection once, when it first appears or
// its reason changes.
func (b *builder) logNewRejections(byKind map[string][]meshconfig.Rejection) {
	now := map[string]string{}
	for _, rs := range byKind {
		for _, r := range rs {
			key := meshconfig.Ref{Kind: r.Kind, Namespace: r.Namespace, Name: r.Name}.String()
			reason := r.Field + ": " + r.Reason
			now[key] = reason
			if b.reported[key] != reason {
				b.s.logger.Warn("kubernetes object invalid, skipped", "kind", r.Kind, "namespace", r.Namespace,
					"name", r.Name, "field", r.Field, "reason", r.Reason)
			}
		}
	}
	b.reported = now
}

// list returns a watched kind's cached objects; none before it started.
func (s *Source) list(name string) []any {
	if st := s.store(name); st != nil {
		return st.List()
	}
	return nil
}

func compareObjects(a, b *meshconfig.Object) int {
	return cmp.Or(
		cmp.Compare(a.Kind.Kind, b.Kind.Kind),
		cmp.Compare(a.Namespace, b.Namespace),
		cmp.Compare(a.Name, b.Name),
	)
}
