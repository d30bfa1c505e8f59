package pushctx_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/pushctx"
)

// waitFor bounds every wait; a passing test never waits for it.
const waitFor = 10 * time.Second

// source is a pushctx.Source whose clusters the test sets. It counts
// Clusters calls: the Manager makes one per build.
type source struct {
	mu       sync.Mutex
	clusters map[string][]mesh.ClusterInput
	calls    map[string]int
}

func newSource() *source {
	return &source{clusters: map[string][]mesh.ClusterInput{}, calls: map[string]int{}}
}

func (s *source) Clusters(meshName string) []mesh.ClusterInput {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[meshName]++
	return append([]mesh.ClusterInput(nil), s.clusters[meshName]...)
}

func (s *source) set(meshName string, clusters ...mesh.ClusterInput) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clusters[meshName] = clusters
}

func (s *source) builds(meshName string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[meshName]
}

// start returns a started Manager over src; it stops with the test.
func start(t *testing.T, src pushctx.Source, quiet, maxWait time.Duration) *pushctx.Manager {
	t.Helper()
	m := pushctx.New(src, pushctx.Options{DebounceQuiet: quiet, DebounceMax: maxWait})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	m.Start(ctx)
	return m
}

// echoConfig is the demo mesh's echo service with a v1/v2 weighted route.
func echoConfig(t *testing.T, v1, v2 int) []*meshconfig.Object {
	t.Helper()
	y := fmt.Sprintf(`apiVersion: networking.istio.io/v1
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
  - {name: v2, labels: {version: v2}}
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
`, v1, v2)
	objs, errs := meshconfig.DecodeYAML([]byte(y), "echo.yaml")
	if len(errs) > 0 {
		t.Fatalf("decode: %v", errs)
	}
	return objs
}

func cluster(name string, synced bool, objs []*meshconfig.Object) mesh.ClusterInput {
	return mesh.ClusterInput{Name: name, Connected: true, Synced: synced, Objects: objs}
}

// closed reports whether ch is closed, without waiting.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// await waits for ch to close.
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitFor):
		t.Fatalf("timed out waiting until %s", what)
	}
}

// eventually polls cond until it holds or the wait bound passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
