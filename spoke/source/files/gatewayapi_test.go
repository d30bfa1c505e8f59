package files

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestGatewayAPIKinds: the files source reads the Gateway API kinds, a
// GatewayClass (cluster-scoped) under the config model's cluster
// namespace whatever its document says, and rejects, naming it, what the
// API server's schema would refuse and a Gateway API kind nave does not
// implement.
func TestGatewayAPIKinds(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "gateway.yaml"), `
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: nave, namespace: ignored}
spec: {controllerName: nave.io/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge, namespace: shop}
spec:
  gatewayClassName: nave
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: api, namespace: shop}
spec:
  parentRefs: [{name: edge}]
  rules: [{backendRefs: [{name: api, port: 9090, weight: 1}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: bad, namespace: shop}
spec:
  rules: [{matches: [{path: {type: PathPrefix, value: api}}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: UDPRoute
metadata: {name: dns, namespace: shop}
spec: {}
`)
	r := start(t, dir, Options{})
	r.waitForKeys(t, "GRPCRoute shop/api, GatewayClass default/nave, KubernetesGateway shop/edge")
	rs := r.src.Rejections()
	if len(rs) != 2 {
		t.Fatalf("rejections %+v, want the HTTPRoute and the UDPRoute", rs)
	}
	for _, want := range []struct{ kind, field, reason string }{
		{"HTTPRoute", "spec.rules[0].matches[0].path.value", "start with '/'"},
		{"UDPRoute", "kind", "Gateway API kind nave does not support"},
	} {
		found := false
		for _, r := range rs {
			found = found || (r.Kind == want.kind && r.Field == want.field && strings.Contains(r.Reason, want.reason))
		}
		if !found {
			t.Errorf("no rejection of the %s at %s (%q): %+v", want.kind, want.field, want.reason, rs)
		}
	}
}
