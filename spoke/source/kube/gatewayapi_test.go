package kube

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/navemesh/nave/internal/kubetest"
	"github.com/navemesh/nave/internal/metrictest"
	"github.com/navemesh/nave/shared/meshconfig"
	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
)

const gatewayAPIObjects = `
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: nave}
spec: {controllerName: nave.io/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: other}
spec: {controllerName: example.com/other-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: web, namespace: shop}
spec:
  gatewayClassName: nave
  listeners:
  - {name: http, port: 80, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web, namespace: shop}
spec:
  parentRefs: [{name: web}]
  hostnames: [web.example.com]
  rules:
  - backendRefs: [{name: web, port: 80}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: api, namespace: shop}
spec:
  parentRefs: [{name: web}]
  rules:
  - matches: [{method: {service: shop.Api}}]
    backendRefs: [{name: api, port: 9090}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: TCPRoute
metadata: {name: db, namespace: shop}
spec:
  parentRefs: [{name: web}]
  rules:
  - backendRefs: [{name: db, port: 5432}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: ReferenceGrant
metadata: {name: from-edge, namespace: shop}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: edge}]
  to: [{group: "", kind: Service}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {name: web-tls, namespace: shop}
spec:
  targetRefs: [{kind: Service, name: web, group: ""}]
  validation: {wellKnownCACertificates: System, hostname: web.example.com}
`

// TestGatewayAPI runs the source and the status writer against a real
// API server with the Gateway API's standard CRDs: the kinds are watched
// and published, an unsupported kind's objects are reported, and
// statuses are written with observedGeneration, other controllers'
// route parents kept, and an unchanged status not written again.
func TestGatewayAPI(t *testing.T) {
	c := kubetest.Start(t, kubetest.Options{})
	c.Apply(t, kubetest.GatewayAPICRDs(t)...)
	// The source and the writer run as the spoke, with the rights
	// deploy/spoke/rbac.yaml grants it and no more.
	c.Apply(t, repoFile(t, "deploy/spoke/namespace.yaml"), repoFile(t, "deploy/spoke/rbac.yaml"))
	spoke := c.As("system:serviceaccount:nave-system:nave-spoke")
	k := newClient(t, c)
	k.namespace("shop", nil)
	c.Apply(t, []byte(gatewayAPIObjects))
	gw, err := gatewayclient.NewForConfig(c.Admin)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()

	src := runSource(t, spoke, Options{})
	objs := src.waitPublished(t, "the Gateway API objects", all(
		has("GatewayClass", "default/nave"), has("GatewayClass", "default/other"),
		has("KubernetesGateway", "shop/web"), has("HTTPRoute", "shop/web"), has("GRPCRoute", "shop/api"),
		has("TCPRoute", "shop/db"), has("ReferenceGrant", "shop/from-edge")))

	t.Run("kinds are watched and published", func(t *testing.T) {
		spec, err := meshconfig.GatewayAPISpec(find(objs, "HTTPRoute", "shop/web"))
		if err != nil {
			t.Fatal(err)
		}
		if got := spec.(*gatewayv1.HTTPRouteSpec).Hostnames; !slices.Equal(got, []gatewayv1.Hostname{"web.example.com"}) {
			t.Errorf("HTTPRoute hostnames %v", got)
		}
		for _, kind := range []string{"GatewayClass", "KubernetesGateway", "HTTPRoute", "GRPCRoute", "TCPRoute", "TLSRoute", "ReferenceGrant", "UDPRoute", "ListenerSet"} {
			if ks := src.kindStatus(t, kind); ks.State != StateSynced {
				t.Errorf("%s state %q, want %q", kind, ks.State, StateSynced)
			}
		}
		if got := src.metric(t, "nave_spoke_kube_objects", "kind", "HTTPRoute"); got != 1 {
			t.Errorf("objects{HTTPRoute} = %v, want 1", got)
		}
	})

	t.Run("an unsupported kind's objects are reported", func(t *testing.T) {
		ks := src.kindStatus(t, "BackendTLSPolicy")
		if ks.State != StateSynced || ks.Objects != 1 || len(ks.Invalid) != 1 {
			t.Fatalf("BackendTLSPolicy status %+v, want synced with its object invalid", ks)
		}
		if r := ks.Invalid[0]; r.Namespace != "shop" || r.Name != "web-tls" || !strings.Contains(r.Reason, "not supported by nave") {
			t.Errorf("rejection %+v", r)
		}
		if got := src.metric(t, "nave_spoke_kube_invalid_objects", "kind", "BackendTLSPolicy"); got != 1 {
			t.Errorf("invalid_objects{BackendTLSPolicy} = %v, want 1", got)
		}
		if logs := src.logs.String(); !strings.Contains(logs, "kind=BackendTLSPolicy namespace=shop name=web-tls") {
			t.Errorf("no log line for the BackendTLSPolicy")
		}
		if find(src.Objects(), "BackendTLSPolicy", "shop/web-tls") != nil {
			t.Errorf("the BackendTLSPolicy was published")
		}
	})

	// A route parent of another controller, which the writer must keep.
	route, err := gw.GatewayV1().HTTPRoutes("shop").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other := gatewayv1.RouteParentStatus{
		ParentRef:      gatewayv1.ParentReference{Name: "elsewhere"},
		ControllerName: "example.com/other-controller",
		Conditions: []metav1.Condition{{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted",
			LastTransitionTime: metav1.Now(), ObservedGeneration: 1}},
	}
	route.Status.Parents = []gatewayv1.RouteParentStatus{other}
	if route, err = gw.GatewayV1().HTTPRoutes("shop").UpdateStatus(ctx, route, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The gateway's Service: its address becomes the Gateway's.
	k.service(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web-gateway", Namespace: "shop", Labels: map[string]string{"gateway.networking.k8s.io/gateway-name": "web"}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	})
	gwSvc, err := k.CoreV1().Services("shop").Get(ctx, "web-gateway", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	w, reg := runWriter(t, c)
	w.SetObjects(src.Objects())
	hub := hubStatuses(t, src.Objects())
	w.SetStatuses(hub)

	t.Run("statuses are written with observedGeneration", func(t *testing.T) {
		waitFor(t, "nave's GatewayClass accepted", func() bool {
			gc, err := gw.GatewayV1().GatewayClasses().Get(ctx, "nave", metav1.GetOptions{})
			c := apimeta.FindStatusCondition(gc.Status.Conditions, "Accepted")
			return err == nil && c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == gc.Generation
		})
		gc, err := gw.GatewayV1().GatewayClasses().Get(ctx, "other", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c := apimeta.FindStatusCondition(gc.Status.Conditions, "Accepted"); c != nil && c.Status == metav1.ConditionTrue {
			t.Errorf("another controller's GatewayClass was accepted: %+v", c)
		}
		var r *gatewayv1.HTTPRoute
		waitFor(t, "the HTTPRoute's status", func() bool {
			r, err = gw.GatewayV1().HTTPRoutes("shop").Get(ctx, "web", metav1.GetOptions{})
			return err == nil && len(r.Status.Parents) == 2
		})
		if !slices.ContainsFunc(r.Status.Parents, func(p gatewayv1.RouteParentStatus) bool { return p.ControllerName == other.ControllerName }) {
			t.Errorf("the other controller's parent status is gone: %+v", r.Status.Parents)
		}
		ours := r.Status.Parents[slices.IndexFunc(r.Status.Parents, func(p gatewayv1.RouteParentStatus) bool {
			return p.ControllerName == meshconfig.GatewayController
		})]
		for _, c := range ours.Conditions {
			if c.ObservedGeneration != r.Generation || c.LastTransitionTime.IsZero() {
				t.Errorf("condition %+v: want observedGeneration %d and a transition time", c, r.Generation)
			}
		}
		g, err := gw.GatewayV1().Gateways("shop").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c := apimeta.FindStatusCondition(g.Status.Conditions, "Programmed"); c == nil || c.ObservedGeneration != g.Generation {
			t.Errorf("Gateway conditions %+v", g.Status.Conditions)
		}
		if len(g.Status.Listeners) != 1 || g.Status.Listeners[0].Conditions[0].ObservedGeneration != g.Generation {
			t.Errorf("Gateway listeners %+v", g.Status.Listeners)
		}
		if len(g.Status.Addresses) != 1 || g.Status.Addresses[0].Value != gwSvc.Spec.ClusterIP {
			t.Errorf("Gateway addresses %+v, want its Service's cluster IP %s", g.Status.Addresses, gwSvc.Spec.ClusterIP)
		}
		waitFor(t, "the stale status reported", func() bool { return resultOf(w, "GRPCRoute", "api") == StatusStale })
	})

	t.Run("a status write is no spec change, and an unchanged status is not written", func(t *testing.T) {
		// The route as it was before any status write, and now: the
		// source's update filter finds nothing changed.
		cur, err := gw.GatewayV1().HTTPRoutes("shop").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		def := statusKind("HTTPRoute")
		a, _ := def.transform(route)
		b, _ := def.transform(cur.DeepCopy())
		if route.ResourceVersion == cur.ResourceVersion || !def.same(a, b) {
			t.Errorf("a status write (resourceVersion %s -> %s) counts as a change to the source", route.ResourceVersion, cur.ResourceVersion)
		}
		if o := find(src.Objects(), "HTTPRoute", "shop/web"); o.Version != find(objs, "HTTPRoute", "shop/web").Version {
			t.Errorf("the route's content version changed with its status")
		}
		before, err := gw.GatewayV1().HTTPRoutes("shop").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// A new writer remembers nothing: it reads the objects and finds
		// their statuses in force.
		fresh, _ := runWriter(t, c)
		fresh.SetObjects(src.Objects())
		fresh.SetStatuses(hub)
		waitFor(t, "the fresh writer's pass", func() bool {
			return resultOf(fresh, "HTTPRoute", "web") == StatusUnchanged && resultOf(fresh, "KubernetesGateway", "web") == StatusUnchanged &&
				resultOf(fresh, "GatewayClass", "nave") == StatusUnchanged
		})
		after, err := gw.GatewayV1().HTTPRoutes("shop").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if after.ResourceVersion != before.ResourceVersion {
			t.Errorf("the unchanged status was written again: resourceVersion %s -> %s", before.ResourceVersion, after.ResourceVersion)
		}
		if got := metrictest.Value(t, reg, "nave_spoke_gatewayapi_status_writes_total", "result", StatusWritten); got != 3 {
			t.Errorf("writes{written} = %v, want 3 (class, gateway, route)", got)
		}
	})

	t.Run("a new generation gets its own status", func(t *testing.T) {
		r, err := gw.GatewayV1().HTTPRoutes("shop").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r.Spec.Hostnames = append(r.Spec.Hostnames, "www.example.com")
		if r, err = gw.GatewayV1().HTTPRoutes("shop").Update(ctx, r, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		oldVersion := find(src.Objects(), "HTTPRoute", "shop/web").Version
		objs := src.waitPublished(t, "the route's new version", func(objs []*meshconfig.Object) bool {
			o := find(objs, "HTTPRoute", "shop/web")
			return o != nil && o.Version != oldVersion
		})
		w.SetObjects(objs)
		waitFor(t, "the old status found stale", func() bool { return resultOf(w, "HTTPRoute", "web") == StatusStale })
		w.SetStatuses(hubStatuses(t, objs))
		waitFor(t, "the status of generation 2", func() bool {
			cur, err := gw.GatewayV1().HTTPRoutes("shop").Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return false
			}
			i := slices.IndexFunc(cur.Status.Parents, func(p gatewayv1.RouteParentStatus) bool {
				return p.ControllerName == meshconfig.GatewayController
			})
			return i >= 0 && cur.Status.Parents[i].Conditions[0].ObservedGeneration == r.Generation && r.Generation == 2
		})
	})
}

// runWriter starts a status writer on the test cluster until the test ends.
func runWriter(t *testing.T, c *kubetest.Cluster) (*StatusWriter, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	logs := &logBuffer{}
	w, err := NewStatusWriter(c.As("system:serviceaccount:nave-system:nave-spoke"), StatusWriterOptions{
		Logger:     slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("writer Run: %v", err)
		}
		if t.Failed() {
			t.Logf("writer log:\n%s", logs.String())
		}
	})
	return w, reg
}

// hubStatuses are statuses as the hub would send them for objs: the
// Gateway and the HTTPRoute accepted, and the GRPCRoute's for a version
// that never existed.
func hubStatuses(t *testing.T, objs []*meshconfig.Object) []*meshconfigv1.GatewayAPIStatus {
	t.Helper()
	cond := func(typ string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: typ, Message: "ok"}
	}
	status := func(kind, key string, v any) *meshconfigv1.GatewayAPIStatus {
		o := find(objs, kind, key)
		js, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return &meshconfigv1.GatewayAPIStatus{Kind: kind, Namespace: o.Namespace, Name: o.Name, Version: o.Version, Json: js}
	}
	stale := status("GRPCRoute", "shop/api", gatewayv1.RouteStatus{})
	stale.Version = "0000000000000000"
	return []*meshconfigv1.GatewayAPIStatus{
		status("KubernetesGateway", "shop/web", gatewayv1.GatewayStatus{
			Conditions: []metav1.Condition{cond("Accepted"), cond("Programmed")},
			Listeners: []gatewayv1.ListenerStatus{{Name: "http", AttachedRoutes: 1,
				SupportedKinds: []gatewayv1.RouteGroupKind{{Kind: "HTTPRoute"}},
				Conditions:     []metav1.Condition{cond("Accepted"), cond("Programmed"), cond("ResolvedRefs")}}},
		}),
		status("HTTPRoute", "shop/web", gatewayv1.RouteStatus{Parents: []gatewayv1.RouteParentStatus{{
			ParentRef:  gatewayv1.ParentReference{Name: "web"},
			Conditions: []metav1.Condition{cond("Accepted"), cond("ResolvedRefs")},
		}}}),
		stale,
	}
}

func resultOf(w *StatusWriter, kind, name string) string {
	for _, r := range w.Results() {
		if r.Kind == kind && r.Name == name {
			return r.Result
		}
	}
	return ""
}
