package kube

import (
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/navemesh/nave/shared/meshconfig"
)

func kindNamed(name string) *meshconfig.Kind {
	for _, k := range meshconfig.Kinds() {
		if k.Kind == name {
			return k
		}
	}
	return nil
}

// TestMergeRouteStatus: nave's parents are replaced, other controllers'
// kept; conditions get observedGeneration and keep their transition time
// while their status stays; the CRD defaults are filled; merging the
// same hub status again changes nothing.
func TestMergeRouteStatus(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	now := metav1.NewTime(t0.Add(time.Hour))
	gwGroup, gwKind := gatewayv1.Group(gatewayv1.GroupName), gatewayv1.Kind("Gateway")
	cur := gatewayv1.RouteStatus{Parents: []gatewayv1.RouteParentStatus{
		{ParentRef: gatewayv1.ParentReference{Group: &gwGroup, Kind: &gwKind, Name: "other"}, ControllerName: "example.com/x",
			Conditions: []metav1.Condition{{Type: "Accepted", Status: "True", Reason: "Accepted", LastTransitionTime: t0, ObservedGeneration: 1}}},
		{ParentRef: gatewayv1.ParentReference{Group: &gwGroup, Kind: &gwKind, Name: "web"}, ControllerName: meshconfig.GatewayController,
			Conditions: []metav1.Condition{
				{Type: "Accepted", Status: "True", Reason: "Accepted", LastTransitionTime: t0, ObservedGeneration: 1},
				{Type: "ResolvedRefs", Status: "True", Reason: "ResolvedRefs", LastTransitionTime: t0, ObservedGeneration: 1},
			}},
	}}
	curMap, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&cur)
	if err != nil {
		t.Fatal(err)
	}
	hub, _ := json.Marshal(gatewayv1.RouteStatus{Parents: []gatewayv1.RouteParentStatus{{
		ParentRef: gatewayv1.ParentReference{Name: "web"},
		Conditions: []metav1.Condition{
			{Type: "Accepted", Status: "True", Reason: "Accepted"},
			{Type: "ResolvedRefs", Status: "False", Reason: "BackendNotFound", Message: "no Service shop/db"},
		},
	}}})
	merged, changed, err := mergeStatus(kindNamed("HTTPRoute"), curMap, hub, nil, 2, now)
	if err != nil || !changed {
		t.Fatalf("merge: changed %v, err %v; want a change", changed, err)
	}
	var got gatewayv1.RouteStatus
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(merged, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Parents) != 2 || got.Parents[0].ControllerName != "example.com/x" || got.Parents[0].Conditions[0].ObservedGeneration != 1 {
		t.Fatalf("parents %+v: want the other controller's first, untouched", got.Parents)
	}
	ours := got.Parents[1]
	if ours.ControllerName != meshconfig.GatewayController || *ours.ParentRef.Group != gwGroup || *ours.ParentRef.Kind != gwKind {
		t.Errorf("our parent %+v: want our controller and the defaulted parentRef", ours)
	}
	for _, c := range ours.Conditions {
		want := t0 // unchanged status: transition time kept
		if c.Type == "ResolvedRefs" {
			want = now
		}
		if c.ObservedGeneration != 2 || !c.LastTransitionTime.Equal(&want) {
			t.Errorf("condition %s: generation %d, transition %v; want 2, %v", c.Type, c.ObservedGeneration, c.LastTransitionTime, want)
		}
	}
	if _, changed, err := mergeStatus(kindNamed("HTTPRoute"), merged, hub, nil, 2, metav1.NewTime(now.Add(time.Hour))); err != nil || changed {
		t.Errorf("merging the same status again: changed %v, err %v; want no change", changed, err)
	}
}

// TestMergeGatewayStatus: listener conditions by listener name, the
// schema's defaults (supportedKinds group, address type), and the
// Services' addresses when the hub gives none.
func TestMergeGatewayStatus(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	hub, _ := json.Marshal(gatewayv1.GatewayStatus{
		Conditions: []metav1.Condition{{Type: "Programmed", Status: "True", Reason: "Programmed"}},
		Listeners: []gatewayv1.ListenerStatus{{Name: "http", AttachedRoutes: 2,
			SupportedKinds: []gatewayv1.RouteGroupKind{{Kind: "HTTPRoute"}},
			Conditions:     []metav1.Condition{{Type: "Accepted", Status: "True", Reason: "Accepted"}}}},
	})
	addrs := []gatewayv1.GatewayStatusAddress{{Type: ptr(gatewayv1.IPAddressType), Value: "10.0.0.7"}}
	merged, changed, err := mergeStatus(kindNamed("KubernetesGateway"), nil, hub, addrs, 3, now)
	if err != nil || !changed {
		t.Fatalf("merge: changed %v, err %v", changed, err)
	}
	var got gatewayv1.GatewayStatus
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(merged, &got); err != nil {
		t.Fatal(err)
	}
	l := got.Listeners[0]
	if *l.SupportedKinds[0].Group != gatewayv1.GroupName || l.Conditions[0].ObservedGeneration != 3 || l.AttachedRoutes != 2 {
		t.Errorf("listener %+v", l)
	}
	if len(got.Addresses) != 1 || got.Addresses[0].Value != "10.0.0.7" || got.Conditions[0].ObservedGeneration != 3 {
		t.Errorf("status %+v", got)
	}
	if _, changed, _ := mergeStatus(kindNamed("KubernetesGateway"), merged, hub, addrs, 3, now); changed {
		t.Errorf("the same status merged again is a change")
	}
}
