package e2e

// Harness: a spoke with its fallback xDS server enabled, its
// /debug/fallback status, and the config its fallback tests serve.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/navemesh/nave/e2e/harness"
)

// fallbackSpoke is a nave-spoke process with fallback on.
type fallbackSpoke struct {
	*spoke
	xds   int
	state string
}

func newFallbackSpoke(t testing.TB, h *hub, cluster, dir string) *fallbackSpoke {
	s := &fallbackSpoke{spoke: &spoke{admin: harness.FreePort(t), dir: dir}, xds: harness.FreePort(t), state: t.TempDir()}
	s.start(t, h, cluster)
	return s
}

// start runs the spoke process (again, on the same ports and state dir).
func (s *fallbackSpoke) start(t testing.TB, h *hub, cluster string) {
	s.proc = harness.Start(t, "spoke-"+cluster, binary("nave-spoke"),
		"--source", "fs://"+s.dir, "--cluster", cluster, "--hub.address", addr(h.spokes), "--hub.plaintext",
		"--hub.state-dir", s.state, "--admin.listen", addr(s.admin), "--hub.backoff-initial", "100ms", "--hub.backoff-max", "500ms",
		"--fallback.enabled", "--fallback.listen", addr(s.xds), "--fallback.after", "1s", "--fallback.hand-back-after", "3s",
		"--fallback.drain", "1s", "--log.level", "debug")
	harness.WaitReady(t, s.url("/healthz/ready"), 20*time.Second)
}

func (s *fallbackSpoke) status(t testing.TB) fallbackStatus { t.Helper(); return s.fallbackStatus(t) }

type fallbackStatus struct {
	Active      bool      `json:"active"`
	Since       time.Time `json:"since"`
	Transitions int       `json:"transitions"`
	HubSynced   bool      `json:"hubSynced"`
	Proxies     int       `json:"proxies"`
	Remote      struct {
		Complete bool           `json:"complete"`
		Clusters map[string]int `json:"clusters"`
	} `json:"remoteView"`
}

// fallbackStatus is the spoke's /debug/fallback.
func (s *spoke) fallbackStatus(t testing.TB) fallbackStatus {
	t.Helper()
	var st fallbackStatus
	if err := harness.GetJSON(s.url("/debug/fallback"), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// echoIn is cluster-local config: the echo service and one endpoint per
// backend, each with its subset label.
func echoIn(backends map[string]*backend) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: demo}
spec:
  hosts: [%s]
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  location: MESH_INTERNAL
  resolution: STATIC
  workloadSelector: {labels: {app: echo}}
`, echoHost)
	for version, be := range backends {
		b.WriteString("---\n" + echoEndpoint(be, version))
	}
	return b.String()
}

func fallbackRoute(weights map[string]int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: demo}
spec:
  host: %s
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
  - {name: v3, labels: {version: v3}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: demo}
spec:
  hosts: [%s]
  http:
  - route:
`, echoHost, echoHost)
	for _, v := range []string{"v1", "v2", "v3"} {
		if w := weights[v]; w > 0 {
			fmt.Fprintf(&b, "    - {destination: {host: %s, subset: %s}, weight: %d}\n", echoHost, v, w)
		}
	}
	return b.String()
}

// echoEndpoint is one more endpoint of the echo service, in subset version.
func echoEndpoint(be *backend, version string) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: %s, namespace: demo}
spec:
  address: 127.0.0.1
  ports: {grpc: %d}
  labels: {app: echo, version: %s}
`, be.name, be.port, version)
}
