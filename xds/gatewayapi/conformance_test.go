package gatewayapi_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/mesh"
)

// The conformance suite's tests whose assertions are statuses only (no
// traffic), run on the suite's own manifests (testdata/conformance): the
// statuses are the hub's, as the spoke would write them.

// conformanceSnapshot builds a mesh of the suite's base manifests and
// the test's, with nave as the GatewayClass.
func conformanceSnapshot(t *testing.T, test string) *mesh.Snapshot {
	t.Helper()
	var docs []string
	for _, f := range []string{"base_manifests.yaml", "tests_" + test + ".yaml"} {
		data, err := os.ReadFile(filepath.Join("testdata", "conformance", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(strings.ReplaceAll(string(data), "{GATEWAY_CLASS_NAME}", "nave"), "\n---") {
			if d := suiteDoc(t, doc); d != "" {
				docs = append(docs, d)
			}
		}
	}
	docs = append(docs, "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: nave}\nspec: {controllerName: nave.io/gateway-controller}\n")
	objs, errs := meshconfig.DecodeYAML([]byte(strings.Join(docs, "\n---\n")), test)
	if len(errs) > 0 {
		t.Fatal(errs[0])
	}
	return mesh.Build("m", []mesh.ClusterInput{{Name: "c1", Synced: true, Objects: objs}})
}

// suiteDoc keeps a Gateway API document as it is, turns a Service into a
// ServiceEntry of its host and ports, and drops the rest.
func suiteDoc(t *testing.T, doc string) string {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct{ Name, Namespace string }
		Spec       struct {
			Ports []struct {
				Name string `json:"name"`
				Port int    `json:"port"`
			} `json:"ports"`
		}
	}
	if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
		t.Fatalf("%v in %s", err, doc)
	}
	switch {
	case strings.HasPrefix(head.APIVersion, "gateway.networking.k8s.io/"):
		return doc
	case head.APIVersion == "v1" && head.Kind == "Service":
		var ports []string
		for i, p := range head.Spec.Ports {
			ports = append(ports, fmt.Sprintf("{number: %d, name: p%d, protocol: HTTP}", p.Port, i))
		}
		return fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: %s, namespace: %s}\n"+
			"spec: {hosts: [%s.%s.svc.cluster.local], ports: [%s], resolution: STATIC, endpoints: [{address: 10.9.9.9}]}\n",
			head.Metadata.Name, head.Metadata.Namespace, head.Metadata.Name, head.Metadata.Namespace, strings.Join(ports, ", "))
	}
	return ""
}

func gatewayStatus(t *testing.T, s *mesh.Snapshot, ns, name string) gatewayv1.GatewayStatus {
	t.Helper()
	var st gatewayv1.GatewayStatus
	statusOf(t, s, "KubernetesGateway", ns, name, &st)
	return st
}

func routeStatus(t *testing.T, s *mesh.Snapshot, ns, name string) gatewayv1.RouteStatus {
	t.Helper()
	var st gatewayv1.RouteStatus
	statusOf(t, s, "HTTPRoute", ns, name, &st)
	return st
}

func statusOf(t *testing.T, s *mesh.Snapshot, kind, ns, name string, into any) {
	t.Helper()
	for _, st := range s.GatewayAPIStatuses["c1"] {
		if st.Kind == kind && st.Namespace == ns && st.Name == name {
			if err := json.Unmarshal(st.Json, into); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no status of %s %s/%s", kind, ns, name)
}

// listener finds a listener's status.
func listener(t *testing.T, st gatewayv1.GatewayStatus, name string) gatewayv1.ListenerStatus {
	t.Helper()
	for _, l := range st.Listeners {
		if string(l.Name) == name {
			return l
		}
	}
	t.Fatalf("no status of listener %s in %+v", name, st.Listeners)
	return gatewayv1.ListenerStatus{}
}

// hasCondition is the suite's check: the type and status, and the reason
// unless want's is empty.
func hasCondition(conds []metav1.Condition, want metav1.Condition) bool {
	for _, c := range conds {
		if c.Type == want.Type && c.Status == want.Status && (want.Reason == "" || c.Reason == want.Reason) {
			return true
		}
	}
	return false
}

func cond(typ string, ok bool, reason string) metav1.Condition {
	st := metav1.ConditionFalse
	if ok {
		st = metav1.ConditionTrue
	}
	return metav1.Condition{Type: typ, Status: st, Reason: reason}
}

const infra = "gateway-conformance-infra"

func TestConformanceStatuses(t *testing.T) {
	listenerCase := func(test, gw, l string, attached int32, kinds []string, conds ...metav1.Condition) func(t *testing.T) {
		return func(t *testing.T) {
			ls := listener(t, gatewayStatus(t, conformanceSnapshot(t, test), infra, gw), l)
			for _, c := range conds {
				if !hasCondition(ls.Conditions, c) {
					t.Errorf("listener %s: no condition %s=%s (%s) in %+v", l, c.Type, c.Status, c.Reason, ls.Conditions)
				}
			}
			if ls.AttachedRoutes != attached {
				t.Errorf("listener %s: attachedRoutes %d, want %d", l, ls.AttachedRoutes, attached)
			}
			if len(kinds) == 0 && len(ls.SupportedKinds) != 0 {
				t.Errorf("listener %s: supportedKinds %v, want none", l, ls.SupportedKinds)
			}
			for _, k := range kinds {
				found := false
				for _, sk := range ls.SupportedKinds {
					found = found || string(sk.Kind) == k
				}
				if !found {
					t.Errorf("listener %s: supportedKinds %v lack %s", l, ls.SupportedKinds, k)
				}
			}
		}
	}
	routeCase := func(test, ns, route, gw string, want metav1.Condition, noAccepted bool) func(t *testing.T) {
		return func(t *testing.T) {
			s := conformanceSnapshot(t, test)
			rs := routeStatus(t, s, ns, route)
			found := false
			for _, p := range rs.Parents {
				if string(p.ParentRef.Name) == gw && hasCondition(p.Conditions, want) {
					found = true
				}
				if noAccepted && hasCondition(p.Conditions, cond("Accepted", true, "")) {
					t.Errorf("parent %s accepted the route", p.ParentRef.Name)
				}
			}
			if !found {
				t.Errorf("route %s/%s: no parent %s with %s=%s (%s): %+v", ns, route, gw, want.Type, want.Status, want.Reason, rs.Parents)
			}
			if noAccepted {
				for _, l := range gatewayStatus(t, s, infra, gw).Listeners {
					if l.AttachedRoutes != 0 {
						t.Errorf("gateway %s listener %s: %d routes attached, want 0", gw, l.Name, l.AttachedRoutes)
					}
				}
			}
		}
	}
	t.Run("GatewaySecretMissingReferenceGrant", listenerCase("gateway-secret-missing-reference-grant", "gateway-secret-missing-reference-grant", "https", 0,
		[]string{"HTTPRoute"}, cond("ResolvedRefs", false, "RefNotPermitted")))
	t.Run("GatewaySecretInvalidReferenceGrant", listenerCase("gateway-secret-invalid-reference-grant", "gateway-secret-invalid-reference-grant", "https", 0,
		[]string{"HTTPRoute"}, cond("ResolvedRefs", false, "RefNotPermitted")))
	t.Run("GatewaySecretReferenceGrantSpecific", listenerCase("gateway-secret-reference-grant-specific", "gateway-secret-reference-grant-specific", "https", 0,
		[]string{"HTTPRoute"}, cond("Programmed", true, "Programmed"), cond("ResolvedRefs", true, "")))
	t.Run("GatewaySecretReferenceGrantAllInNamespace", listenerCase("gateway-secret-reference-grant-all-in-namespace", "gateway-secret-reference-grant-all-in-namespace", "https", 0,
		[]string{"HTTPRoute"}, cond("Programmed", true, "Programmed"), cond("ResolvedRefs", true, "")))
	t.Run("GatewayInvalidRouteKind/only invalid", listenerCase("gateway-invalid-route-kind", "gateway-only-invalid-route-kind", "http", 0,
		nil, cond("ResolvedRefs", false, "InvalidRouteKinds")))
	t.Run("GatewayInvalidRouteKind/supported and invalid", listenerCase("gateway-invalid-route-kind", "gateway-supported-and-invalid-route-kind", "http", 0,
		[]string{"HTTPRoute"}, cond("ResolvedRefs", false, "InvalidRouteKinds")))
	t.Run("GatewayWithAttachedRoutes/one", listenerCase("gateway-with-attached-routes", "gateway-with-one-attached-route", "http", 1,
		[]string{"HTTPRoute"}, cond("Accepted", true, ""), cond("ResolvedRefs", true, "")))
	t.Run("GatewayWithAttachedRoutes/two", listenerCase("gateway-with-attached-routes", "gateway-with-two-attached-routes", "http", 2,
		[]string{"HTTPRoute"}, cond("Accepted", true, ""), cond("ResolvedRefs", true, "")))
	t.Run("GatewayWithAttachedRoutes/not accepted", routeCase("gateway-with-attached-routes", infra, "http-route-not-accepted", "gateway-with-two-attached-routes",
		cond("Accepted", false, "NoMatchingListenerHostname"), false))
	// Not here: the listener of that test whose certificateRef names a
	// Secret that does not exist. Secrets stay in their cluster (decision
	// 038); the hub cannot tell a missing one.
	t.Run("GatewayWithAttachedRoutes/unresolved route", routeCase("gateway-with-attached-routes", infra, "http-route-4", "unresolved-gateway-with-one-attached-unresolved-route",
		cond("ResolvedRefs", false, ""), false))
	t.Run("HTTPRouteInvalidParentRefNotMatchingListenerPort", routeCase("httproute-invalid-parentref-not-matching-listener-port", infra,
		"httproute-listener-not-matching-route-port", "same-namespace", cond("Accepted", false, "NoMatchingParent"), true))
	t.Run("HTTPRouteInvalidParentRefNotMatchingSectionName", routeCase("httproute-invalid-parentref-not-matching-section-name", infra,
		"httproute-listener-not-matching-section-name", "same-namespace", cond("Accepted", false, "NoMatchingParent"), true))
	t.Run("HTTPRouteInvalidCrossNamespaceParentRef", routeCase("httproute-invalid-cross-namespace-parent-ref", "gateway-conformance-web-backend",
		"invalid-cross-namespace-parent-ref", "same-namespace", cond("Accepted", false, "NotAllowedByListeners"), true))
	t.Run("HTTPRouteDisallowedKind", routeCase("httproute-disallowed-kind", infra, "disallowed-kind", "tlsroutes-only",
		cond("Accepted", false, "NotAllowedByListeners"), true))
}
