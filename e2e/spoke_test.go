package e2e

// Harness: nave-spoke processes (file, polled, enrolled, Kubernetes) and
// the Istio config documents they serve.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/internal/kubetest"
)

// spoke is a nave-spoke process reading a directory.
type spoke struct {
	admin int
	dir   string
	proc  *harness.Proc
}

func newSpoke(t *testing.T, h *hub, cluster, dir string, extra ...string) *spoke {
	s := &spoke{admin: harness.FreePort(t), dir: dir}
	s.proc = harness.Start(t, "spoke-"+cluster, binary("nave-spoke"), append([]string{
		"--source", "fs://" + dir, "--cluster", cluster, "--hub.address", addr(h.spokes), "--hub.plaintext",
		"--hub.state-dir", t.TempDir(), "--admin.listen", addr(s.admin), "--hub.backoff-initial", "100ms", "--hub.backoff-max", "1s",
		"--log.level", "debug"}, extra...)...)
	harness.WaitReady(t, s.url("/healthz/ready"), 20*time.Second)
	return s
}

func (s *spoke) url(path string) string { return "http://" + addr(s.admin) + path }

// hubModes are the ways a spoke's state reaches the hub: the spoke dials
// (push) or the hub dials the spoke (polled); the protocol tests run in
// both.
var hubModes = []string{"push", "polled"}

// polledSpoke is how a test runs a spoke in mode: for polled, the flags
// the hub needs to dial the spoke of mesh/cluster (hubArgs, given before
// the hub starts) and the spoke needs to listen for it (spokeArgs), on a
// port of its own; nothing for push.
type polledSpoke struct {
	port               int
	hubArgs, spokeArgs []string
}

func pollArgs(t testing.TB, mode, mesh, cluster string) polledSpoke {
	if mode != "polled" {
		return polledSpoke{}
	}
	port := harness.FreePort(t)
	return polledSpoke{port: port,
		hubArgs:   []string{"--spokes.poll", mesh + "/" + cluster + "=" + addr(port), "--spokes.poll-backoff-initial", "100ms", "--spokes.poll-backoff-max", "1s"},
		spokeArgs: []string{"--hub.mode", "polled", "--hub.poll-listen", addr(port)},
	}
}

// secureConfig is a spoke's config directory content for the security
// tests: one ServiceEntry, so a synced cluster is visible.
const secureConfig = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: demo}
spec:
  hosts: [echo.demo.svc.cluster.local]
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  endpoints: [{address: 127.0.0.1, ports: {grpc: 17071}}]
`

// secureSpoke is a spoke process that enrolls with a join token.
type secureSpoke struct {
	*spoke
	state string
}

// startSecureSpoke starts a spoke of mesh (the default mesh if "") that
// enrolls with token; it does not wait for it to be ready.
func startSecureSpoke(t *testing.T, h *hub, name, mesh, cluster, token string) *secureSpoke {
	t.Helper()
	return startEnrolledSpoke(t, h, name, mesh, cluster, secureConfig, token, t.TempDir())
}

// startEnrolledSpoke starts a spoke of mesh (the default mesh if "")
// serving config, keeping its config, token file and credentials under
// work: started again on the same work, it comes back with the credentials
// it enrolled for (token is then not read). It does not wait for it to be
// ready. extra are more flags.
func startEnrolledSpoke(t *testing.T, h *hub, name, mesh, cluster, config, token, work string, extra ...string) *secureSpoke {
	t.Helper()
	dir := filepath.Join(work, "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "config.yaml"), config)
	tokenFile := filepath.Join(work, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &secureSpoke{spoke: &spoke{admin: harness.FreePort(t), dir: dir}, state: filepath.Join(work, "state")}
	args := []string{"--source", "fs://" + dir, "--cluster", cluster, "--hub.address", h.at(h.spokes),
		"--admin.listen", addr(s.admin), "--hub.backoff-initial", "100ms", "--hub.backoff-max", "1s",
		"--hub.token-file", tokenFile, "--hub.ca-hash", h.pin(t), "--hub.state-dir", s.state, "--log.level", "debug"}
	if mesh != "" {
		args = append(args, "--mesh", mesh)
	}
	args = append(args, extra...)
	if h.ns != nil { // a hub in a network namespace: its spokes run there too
		s.proc = h.ns.Start(t, name, binary("nave-spoke"), args...)
		return s
	}
	s.proc = harness.Start(t, name, binary("nave-spoke"), args...)
	return s
}

// waitExit waits for p to exit with a non-zero code and a log line
// containing want.
func waitExit(t *testing.T, p *harness.Proc, want string) {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("the spoke did not give up; log:\n%s", p.Log())
	}
	if p.ExitCode() == 0 || !strings.Contains(p.Log(), want) {
		t.Fatalf("spoke exited %d; want non-zero with %q in its log:\n%s", p.ExitCode(), want, p.Log())
	}
}

// workloadConfig is the demo namespace's service accounts and mesh config:
// an echo service whose one endpoint is the test's xDS server on
// 127.0.0.1:PORT, STRICT mTLS for the namespace, ISTIO_MUTUAL for callers,
// and a DENY for calls carrying x-block.
func workloadConfig(port int) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: demo}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: server, namespace: demo}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: client, namespace: demo}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: demo}
spec:
  hosts: [echo.demo.svc.cluster.local]
  location: MESH_INTERNAL
  ports: [{number: 7070, name: grpc, protocol: GRPC, targetPort: %d}]
  resolution: STATIC
  endpoints: [{address: 127.0.0.1, labels: {app: echo}, serviceAccount: server}]
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: strict, namespace: demo}
spec: {mtls: {mode: STRICT}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: demo}
spec:
  host: echo.demo.svc.cluster.local
  trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: blocked, namespace: demo}
spec:
  selector: {matchLabels: {app: echo}}
  action: DENY
  rules: [{when: [{key: "request.headers[x-block]", values: ["yes"]}]}]
`, port)
}

// startSecureKubeSpoke starts a spoke watching c that enrolls with token
// and serves its registration authority on raAddr.
func startSecureKubeSpoke(t testing.TB, h *hub, cluster, token, raAddr string, c *kubetest.Cluster, extra ...string) *secureSpoke {
	t.Helper()
	work := t.TempDir()
	tokenFile := filepath.Join(work, "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &secureSpoke{spoke: &spoke{admin: harness.FreePort(t)}, state: filepath.Join(work, "state")}
	args := []string{"--source", "kubernetes", "--kubernetes.kubeconfig", c.Kubeconfig(t, spokeIdentity, "system:serviceaccounts"),
		"--cluster", cluster, "--hub.address", addr(h.spokes), "--admin.listen", addr(s.admin),
		"--hub.token-file", tokenFile, "--hub.ca-hash", h.pin(t), "--hub.state-dir", s.state, "--ra.listen", raAddr,
		"--hub.backoff-initial", "100ms", "--hub.backoff-max", "1s", "--log.level", "debug"}
	s.proc = harness.Start(t, "spoke-"+cluster, binary("nave-spoke"), append(args, extra...)...)
	harness.WaitReady(t, s.url("/healthz/ready"), 60*time.Second)
	return s
}

func serviceEntry(name, host string, port int) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: %s, namespace: demo}
spec:
  hosts: [%s]
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  endpoints: [{address: 127.0.0.1, ports: {grpc: %d}}]
`, name, host, port)
}

// addService returns an add for checkNoRemovals that appends the service to
// the config of the file spoke serving dir.
func addService(t *testing.T, dir string) func(name, host string) {
	return func(name, host string) {
		t.Helper()
		path := filepath.Join(dir, "config.yaml")
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, path, strings.TrimRight(string(b), "\n")+"\n---\n"+serviceEntry(name, host, 17999))
	}
}

// reviewsYAML is the same service in both clusters (identical objects are
// no conflict); the VirtualService of the same name differs, so the merge must pick one (the older) and report
// the other. The "broken" VirtualService has two faults the generators
// find (a subset no DestinationRule defines, an unknown host) and one the
// spoke's validation finds (a regex RE2 cannot compile).
func reviewsYAML(created, subset string) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: reviews, namespace: shop}
spec:
  hosts: [reviews.shop.svc.cluster.local]
  ports: [{number: 9080, name: http, protocol: HTTP}]
  location: MESH_INTERNAL
  resolution: STATIC
  endpoints: [{address: 10.1.0.1, labels: {version: v1}}, {address: 10.1.0.2, labels: {version: v2}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: shop}
spec:
  host: reviews.shop.svc.cluster.local
  subsets: [{name: v1, labels: {version: v1}}, {name: v2, labels: {version: v2}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: shop, creationTimestamp: "%s"}
spec:
  hosts: [reviews.shop.svc.cluster.local]
  http: [{route: [{destination: {host: reviews.shop.svc.cluster.local, subset: %s}}]}]
`, created, subset)
}

const brokenYAML = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ratings, namespace: shop}
spec:
  hosts: [ratings.shop.svc.cluster.local]
  ports: [{number: 9080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.2.0.1}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: broken, namespace: shop}
spec:
  hosts: [ratings.shop.svc.cluster.local]
  http:
  - match: [{headers: {x-canary: {exact: "yes"}}}]
    route: [{destination: {host: reviews.shop.svc.cluster.local, subset: v9}}]
  - route: [{destination: {host: nowhere.example.com}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: bad-regex, namespace: shop}
spec:
  hosts: [ratings.shop.svc.cluster.local]
  http: [{match: [{uri: {regex: "(unclosed"}}], route: [{destination: {host: ratings.shop.svc.cluster.local}}]}]
`
