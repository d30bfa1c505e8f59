package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/internal/testwait"
)

// gatewayAPIYAML is the echo services as Kubernetes would name them
// (ServiceEntries stand in for the Services: echo, and one per version)
// and a GRPCRoute on the echo Service (GAMMA): x-user: beta goes to v3,
// the rest 80/20 to v1/v2 (both rules match the service, so the one
// with more header matches comes first: the Gateway API's precedence); and a Gateway whose HTTPS listener refers to
// a Secret of another namespace without a ReferenceGrant.
func gatewayAPIYAML(backends []*backend) string {
	var b strings.Builder
	svc := func(name, selector string) {
		fmt.Fprintf(&b, `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: %[1]s, namespace: demo}
spec:
  hosts: [%[1]s.demo.svc.cluster.local]
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  location: MESH_INTERNAL
  resolution: STATIC
  workloadSelector: {labels: {%[2]s}}
`, name, selector)
	}
	svc("echo", "app: echo")
	for i, be := range backends {
		svc(fmt.Sprintf("echo-v%d", i+1), fmt.Sprintf("version: v%d", i+1))
		fmt.Fprintf(&b, `---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: %s, namespace: demo}
spec:
  address: 127.0.0.1
  ports: {grpc: %d}
  labels: {app: echo, version: v%d}
`, be.name, be.port, i+1)
	}
	b.WriteString(`---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: echo, namespace: demo}
spec:
  parentRefs: [{group: "", kind: Service, name: echo, port: 7070}]
  rules:
  - matches: [{method: {service: grpc.health.v1.Health}, headers: [{name: x-user, value: beta}]}]
    backendRefs: [{name: echo-v3, port: 7070}]
  - matches: [{method: {service: grpc.health.v1.Health}}]
    backendRefs:
    - {name: echo-v1, port: 7070, weight: 80}
    - {name: echo-v2, port: 7070, weight: 20}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: nave}
spec: {controllerName: nave.io/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge, namespace: demo}
spec:
  gatewayClassName: nave
  listeners:
  - name: https
    port: 443
    protocol: HTTPS
    tls: {certificateRefs: [{name: edge-cert, namespace: secrets}]}
`)
	return b.String()
}

// TestGatewayAPI: a GRPCRoute on a Service, translated by the hub, routes
// real proxyless grpc-go clients by header and by weight; and the hub's
// status of a Gateway whose listener refers to a Secret of another
// namespace without a ReferenceGrant reaches the spoke over Watch with
// ResolvedRefs=False, reason RefNotPermitted.
func TestGatewayAPI(t *testing.T) {
	backends := []*backend{startBackend(t, "echo-v1"), startBackend(t, "echo-v2"), startBackend(t, "echo-v3")}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "mesh.yaml"), gatewayAPIYAML(backends))
	h := newHub(t)
	sp := newSpoke(t, h, "cluster-a", dir, "--fallback.enabled", "--fallback.listen", addr(harness.FreePort(t)),
		"--hub.state-dir", t.TempDir())
	target := "xds:///" + echoHost + ":7070"
	plain := startClient(t, h, target, "plain.demo")
	beta := startClient(t, h, target, "beta.demo", "--header", "x-user=beta")

	t.Run("weights and header match", func(t *testing.T) {
		assertEchoRoutes(t, plain, beta)
	})

	t.Run("status over Watch", func(t *testing.T) {
		var view struct {
			GatewayAPIStatuses map[string]json.RawMessage `json:"gatewayAPIStatuses"`
		}
		testwait.For(t, 30*time.Second, func() error {
			if err := harness.GetJSON(sp.url("/debug/remote"), &view); err != nil {
				return err
			}
			raw := view.GatewayAPIStatuses["KubernetesGateway/demo/edge"]
			if raw == nil {
				return fmt.Errorf("no status of Gateway demo/edge yet: %v", view.GatewayAPIStatuses)
			}
			var st struct {
				Listeners []struct {
					Name       string `json:"name"`
					Conditions []struct{ Type, Status, Reason string }
				} `json:"listeners"`
			}
			if err := json.Unmarshal(raw, &st); err != nil {
				return err
			}
			for _, l := range st.Listeners {
				for _, c := range l.Conditions {
					if l.Name == "https" && c.Type == "ResolvedRefs" && c.Status == "False" && c.Reason == "RefNotPermitted" {
						return nil
					}
				}
			}
			return fmt.Errorf("gateway status %s: want listener https ResolvedRefs=False/RefNotPermitted", raw)
		})
		route := view.GatewayAPIStatuses["GRPCRoute/demo/echo"]
		var rs struct {
			Parents []struct {
				Conditions []struct{ Type, Status, Reason string }
			}
		}
		if err := json.Unmarshal(route, &rs); err != nil {
			t.Fatal(err)
		}
		if len(rs.Parents) != 1 || len(rs.Parents[0].Conditions) == 0 || rs.Parents[0].Conditions[0].Type != "Accepted" ||
			rs.Parents[0].Conditions[0].Status != "True" {
			t.Fatalf("GRPCRoute status %s: want the Service parent Accepted", route)
		}
	})
}
