package e2e

// Harness: the Kubernetes API server (internal/kubetest) and the objects
// tests put in it.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/internal/kubetest"
)

// spokeIdentity is the service account deploy/spoke/rbac.yaml grants.
const spokeIdentity = "system:serviceaccount:nave-system:nave-spoke"

// kubeCluster starts an API server with nave's CRDs and RBAC applied.
func kubeCluster(t testing.TB) *kubetest.Cluster {
	t.Helper()
	c := kubetest.Start(t, kubetest.Options{})
	root := harness.ModuleRoot()
	for _, f := range []string{"namespace.yaml", "istio-crds.yaml", "rbac.yaml"} {
		b, err := os.ReadFile(filepath.Join(root, "deploy", "spoke", f))
		if err != nil {
			t.Fatal(err)
		}
		c.Apply(t, b)
	}
	return c
}

// node is a Kubernetes Node with topology labels.
func node(name, region, zone string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Node
metadata:
  name: %s
  labels: {topology.kubernetes.io/region: %s, topology.kubernetes.io/zone: %s}
`, name, region, zone)
}

const echoService = `apiVersion: v1
kind: Namespace
metadata: {name: demo}
---
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: demo, labels: {app: echo}}
spec:
  selector: {app: echo}
  ports: [{name: grpc, port: 7070, targetPort: 7070, appProtocol: grpc}]
`

// pod and its EndpointSlice: no controller manager runs, so the test
// writes the slice the endpoint controller would.
func podWithSlice(name, version, nodeName, address string, port int, ready, terminating bool) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %[1]s, namespace: demo, labels: {app: echo, version: %[2]s}}
spec:
  nodeName: %[3]s
  serviceAccountName: default
  containers: [{name: echo, image: echo}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: echo-%[1]s, namespace: demo, labels: {kubernetes.io/service-name: echo}}
addressType: IPv4
ports: [{name: grpc, port: %[4]d, protocol: TCP}]
endpoints:
- addresses: [%[7]s]
  conditions: {ready: %[5]t, serving: %[5]t, terminating: %[6]t}
  nodeName: %[3]s
  targetRef: {kind: Pod, namespace: demo, name: %[1]s}
`, name, version, nodeName, port, ready, terminating, address)
}

// shippedWebhooks is the manifest deploy/spoke/file as shipped, with the
// clientConfig of every webhook of its webhook configurations pointed at
// https://127.0.0.1:port and the path of the Service it names.
func shippedWebhooks(t *testing.T, file string, port int) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(harness.ModuleRoot(), "deploy", "spoke", file))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	configs := 0
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		if obj["kind"] == "ValidatingWebhookConfiguration" || obj["kind"] == "MutatingWebhookConfiguration" {
			configs++
			hooks, _ := obj["webhooks"].([]any)
			if len(hooks) == 0 {
				t.Fatalf("deploy/spoke/%s registers no webhook", file)
			}
			for _, h := range hooks {
				cc := h.(map[string]any)["clientConfig"].(map[string]any)
				svc, _ := cc["service"].(map[string]any)
				if svc == nil || cc["caBundle"] != nil {
					t.Fatalf("shipped clientConfig %v: want a service and no caBundle", cc)
				}
				delete(cc, "service")
				cc["url"] = fmt.Sprintf("https://127.0.0.1:%d%s", port, svc["path"])
			}
		}
		y, err := yaml.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(y))
	}
	if configs == 0 {
		t.Fatalf("deploy/spoke/%s holds no webhook configuration", file)
	}
	return []byte(strings.Join(out, "---\n"))
}
