package kube

import (
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/navemesh/nave/shared/meshconfig"
	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
)

// These tests cover the naming and merging rules on plain values; the
// API-server tests cover the same code fed by real informers.

func slice(ns, name, svc string, typ discoveryv1.AddressType, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: typ,
		Endpoints:   eps,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080))}},
	}
}

func podRef(name string) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Pod", Name: name}
}

func workloadsByName(t *testing.T, objs []*meshconfig.Object) map[string]*meshconfigv1.Workload {
	t.Helper()
	out := map[string]*meshconfigv1.Workload{}
	for _, o := range objs {
		if err := meshconfig.Validate(o); err != nil {
			t.Errorf("workload %s invalid: %v", o.Key(), err)
		}
		out[o.Key()] = o.Spec.(*meshconfigv1.Workload)
	}
	return out
}

func TestWorkloadNamesAreUniquePerNamespace(t *testing.T) {
	v := &view{domain: "cluster.local"}
	objs := workloadObjects(v, []*discoveryv1.EndpointSlice{
		// A dual-stack pod: one address in each slice.
		slice("a", "web-v4", "web", discoveryv1.AddressTypeIPv4,
			discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, TargetRef: podRef("web-1")},
			discoveryv1.Endpoint{Addresses: []string{"10.0.0.9"}}),
		slice("a", "web-v6", "web", discoveryv1.AddressTypeIPv6,
			discoveryv1.Endpoint{Addresses: []string{"fd00::1"}, TargetRef: podRef("web-1")}),
		// The same pod behind a second service: one workload, two services.
		slice("a", "api-x", "api", discoveryv1.AddressTypeIPv4,
			discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, TargetRef: podRef("web-1")}),
		// The same pod name in another namespace stays as it is.
		slice("b", "web-y", "web", discoveryv1.AddressTypeIPv4,
			discoveryv1.Endpoint{Addresses: []string{"10.0.1.1"}, TargetRef: podRef("web-1")}),
		// FQDN slices and slices of no service are skipped.
		slice("a", "ext", "ext", discoveryv1.AddressTypeFQDN, discoveryv1.Endpoint{Addresses: []string{"example.com"}}),
		slice("a", "orphan", "", discoveryv1.AddressTypeIPv4, discoveryv1.Endpoint{Addresses: []string{"10.0.0.7"}}),
	})
	got := workloadsByName(t, objs)
	want := map[string]struct {
		address  string
		services []string
	}{
		"a/web-1-10-0-0-1":  {"10.0.0.1", []string{"api.a.svc.cluster.local", "web.a.svc.cluster.local"}},
		"a/web-1-fd00--1":   {"fd00::1", []string{"web.a.svc.cluster.local"}},
		"a/web-v4-10-0-0-9": {"10.0.0.9", []string{"web.a.svc.cluster.local"}},
		"b/web-1":           {"10.0.1.1", []string{"web.b.svc.cluster.local"}},
	}
	if len(got) != len(want) || len(objs) != len(want) {
		t.Fatalf("workloads %v, want %d: %v", slices.Sorted(maps.Keys(got)), len(want), want)
	}
	for name, w := range want {
		g := got[name]
		if g == nil {
			t.Errorf("workload %s missing; have %v", name, slices.Sorted(maps.Keys(got)))
			continue
		}
		if g.GetAddress() != w.address || !slices.Equal(g.GetServices(), w.services) {
			t.Errorf("workload %s = %s %v, want %s %v", name, g.GetAddress(), g.GetServices(), w.address, w.services)
		}
		if g.GetPorts()["http"] != 8080 {
			t.Errorf("workload %s ports %v, want http: 8080", name, g.GetPorts())
		}
	}
}

func TestEndpointHealth(t *testing.T) {
	asCached := func(p *corev1.Pod) *pod {
		t.Helper()
		out, err := transformPod(newLabelSets())(p)
		if err != nil {
			t.Fatal(err)
		}
		return out.(*pod)
	}
	readyPod := asCached(&corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}})
	unreadyPod := asCached(&corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}}})
	deleting := asCached(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &metav1.Time{}}})
	tests := []struct {
		name string
		cond discoveryv1.EndpointConditions
		pod  *pod
		want meshconfigv1.Workload_Health
	}{
		{"ready", discoveryv1.EndpointConditions{Ready: ptr(true)}, nil, meshconfigv1.Workload_READY},
		{"not ready", discoveryv1.EndpointConditions{Ready: ptr(false)}, readyPod, meshconfigv1.Workload_NOT_READY},
		{"terminating", discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}, nil, meshconfigv1.Workload_TERMINATING},
		{"pod being deleted", discoveryv1.EndpointConditions{Ready: ptr(true)}, deleting, meshconfigv1.Workload_TERMINATING},
		{"unknown, pod ready", discoveryv1.EndpointConditions{}, readyPod, meshconfigv1.Workload_READY},
		{"unknown, pod not ready", discoveryv1.EndpointConditions{}, unreadyPod, meshconfigv1.Workload_NOT_READY},
		{"unknown, no pod", discoveryv1.EndpointConditions{}, nil, meshconfigv1.Workload_READY},
	}
	for _, tt := range tests {
		sl := compactSlice(&discoveryv1.EndpointSlice{Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, Conditions: tt.cond}}})
		if got := endpointHealth(sl.endpoints[0], tt.pod); got != tt.want {
			t.Errorf("%s: health %v, want %v", tt.name, got, tt.want)
		}
	}
}

// client-go keys and versions a cached pod as the Pod it came from.
func TestCachedPodKeysAsThePod(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", UID: "u1", ResourceVersion: "42", Labels: map[string]string{"app": "web"}}}
	out, err := transformPod(newLabelSets())(p)
	if err != nil {
		t.Fatal(err)
	}
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(out)
	if err != nil || key != "shop/web-1" {
		t.Errorf("key %q, %v; want shop/web-1", key, err)
	}
	m, err := meta.Accessor(out)
	if err != nil {
		t.Fatal(err)
	}
	if m.GetResourceVersion() != "42" || m.GetUID() != "u1" || m.GetLabels()["app"] != "web" {
		t.Errorf("metadata %+v", m)
	}
}
