// Package pushctxtest helps tests of the xDS engine drive a
// pushctx.Publisher: a Source whose clusters the test sets, the demo
// mesh's echo config, and bounded waits. Imported only by tests.
package pushctxtest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/mesh"
)

// WaitFor bounds every wait; a passing test never waits for it.
const WaitFor = 10 * time.Second

// Source is a pushctx.Source whose clusters the test sets. It counts
// Clusters calls: the Publisher makes one per build. Safe for concurrent use.
type Source struct {
	mu       sync.Mutex
	clusters map[string][]mesh.ClusterInput
	calls    map[string]int
}

// NewSource returns a Source with no clusters.
func NewSource() *Source {
	return &Source{clusters: map[string][]mesh.ClusterInput{}, calls: map[string]int{}}
}

// Clusters implements pushctx.Source.
func (s *Source) Clusters(meshName string) []mesh.ClusterInput {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[meshName]++
	return append([]mesh.ClusterInput(nil), s.clusters[meshName]...)
}

// Set replaces the clusters of meshName.
func (s *Source) Set(meshName string, clusters ...mesh.ClusterInput) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clusters[meshName] = clusters
}

// Builds counts the Clusters calls for meshName.
func (s *Source) Builds(meshName string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[meshName]
}

// EchoYAML is the demo mesh's echo service: a ServiceEntry selecting two
// WorkloadEntries, a DestinationRule with subsets v1 and v2 (v2 with the
// simple load balancer v2LB, unless it is empty), and a VirtualService
// splitting v1/v2 by weight.
func EchoYAML(v1, v2 int, v2LB string) string {
	policy := ""
	if v2LB != "" {
		policy = ", trafficPolicy: {loadBalancer: {simple: " + v2LB + "}}"
	}
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: demo}
spec:
  hosts: [echo.demo.svc.cluster.local]
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  workloadSelector: {labels: {app: echo}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: echo-v1, namespace: demo}
spec: {address: 127.0.0.1, ports: {grpc: 17071}, labels: {app: echo, version: v1}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: echo-v2, namespace: demo}
spec: {address: 127.0.0.1, ports: {grpc: 17072}, labels: {app: echo, version: v2}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: demo}
spec:
  host: echo.demo.svc.cluster.local
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}%s}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: demo}
spec:
  hosts: [echo.demo.svc.cluster.local]
  http:
  - route:
    - {destination: {host: echo.demo.svc.cluster.local, subset: v1}, weight: %d}
    - {destination: {host: echo.demo.svc.cluster.local, subset: v2}, weight: %d}
`, policy, v1, v2)
}

// EchoConfig is EchoYAML without a load balancer, decoded.
func EchoConfig(t testing.TB, v1, v2 int) []*meshconfig.Object {
	t.Helper()
	return Decode(t, EchoYAML(v1, v2, ""))
}

// Decode decodes YAML config, failing the test on any error.
func Decode(t testing.TB, y string) []*meshconfig.Object {
	t.Helper()
	objs, errs := meshconfig.DecodeYAML([]byte(y), "test.yaml")
	if len(errs) > 0 {
		t.Fatalf("decode: %v", errs)
	}
	return objs
}

// Cluster is a connected cluster holding objs.
func Cluster(name string, synced bool, objs []*meshconfig.Object) mesh.ClusterInput {
	return mesh.ClusterInput{Name: name, Connected: true, Synced: synced, Objects: objs}
}

// Closed reports whether ch is Closed, without waiting.
func Closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Await waits for ch to close.
func Await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(WaitFor):
		t.Fatalf("timed out waiting until %s", what)
	}
}

// Eventually polls cond until it holds (testwait.Until).
func Eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, what, cond)
}
