package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/internal/testwait"
)

// hub is a nave-hub process on fixed loopback ports (so it can be restarted
// on the same ones).
type hub struct {
	t                  testing.TB
	admin, spokes, xds int
	proc               *harness.Proc
	extraArgs          []string
	// state is the state dir of a hub serving TLS (newSecureHub); ""
	// runs it in plaintext mode.
	state string
	// navectlState are the navectl flags that reach the hub's state;
	// nil: --state-dir state.
	navectlState []string
	// ns, if set, is the network namespace the hub runs in; host is the
	// address its admin, spokes and xds listeners bind (default 127.0.0.1).
	ns   *harness.NetNS
	host string
}

func newHub(t testing.TB, extra ...string) *hub {
	h := &hub{t: t, admin: harness.FreePort(t), spokes: harness.FreePort(t), xds: harness.FreePort(t), extraArgs: extra}
	h.start()
	return h
}

func (h *hub) start() {
	h.t.Helper()
	h.launch()
	h.waitReady()
}

// launch starts the hub process without waiting for it.
func (h *hub) launch() {
	h.t.Helper()
	args := append([]string{
		"--admin.listen", h.at(h.admin), "--spokes.listen", h.at(h.spokes), "--xds.listen", h.at(h.xds),
		"--log.level", "debug", "--push.verify-incremental",
	}, h.extraArgs...)
	if h.state == "" {
		args = append(args, "--tls.plaintext")
	} else {
		args = append(args, "--state.dir", h.state)
	}
	if h.ns != nil {
		h.proc = h.ns.Start(h.t, "hub", binary("nave-hub"), args...)
		return
	}
	h.proc = harness.Start(h.t, "hub", binary("nave-hub"), args...)
}

// at is host:port on the hub's listen host.
func (h *hub) at(port int) string {
	if h.host == "" {
		return addr(port)
	}
	return net.JoinHostPort(h.host, strconv.Itoa(port))
}

// waitReady waits until the hub reports ready.
func (h *hub) waitReady() {
	h.t.Helper()
	harness.WaitReady(h.t, h.url("/healthz/ready"), 20*time.Second)
}

func (h *hub) url(path string) string { return "http://" + h.at(h.admin) + path }

func addr(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }

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
		"--admin.listen", addr(s.admin), "--hub.backoff-initial", "100ms", "--hub.backoff-max", "1s",
		"--log.level", "debug"}, extra...)...)
	harness.WaitReady(t, s.url("/healthz/ready"), 20*time.Second)
	return s
}

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

func (s *spoke) url(path string) string { return "http://" + addr(s.admin) + path }

// backend is an in-test gRPC server that names itself in a response header.
type backend struct {
	name string
	port int
	srv  *grpc.Server
}

func startBackend(t *testing.T, name string) *backend {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-nave-backend", name))
		return handler(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return &backend{name: name, port: lis.Addr().(*net.TCPAddr).Port, srv: srv}
}

// call is one line of nave-demo-client --json.
type call struct {
	Seq     int       `json:"seq"`
	Time    time.Time `json:"time"`
	Backend string    `json:"backend"`
	Code    string    `json:"code"`
	Error   string    `json:"error"`
}

// client is a nave-demo-client process resolving xds:/// through the hub.
type client struct {
	proc *harness.Proc
	mu   sync.Mutex
	read int
	all  []call
}

func startClient(t *testing.T, h *hub, target, nodeID string, extra ...string) *client {
	args := append([]string{"--target", target, "--hub", addr(h.xds), "--node-id", nodeID,
		"--interval", "5ms", "--timeout", "2s", "--json"}, extra...)
	return &client{proc: harness.Start(t, "client-"+nodeID, binary("nave-demo-client"), args...)}
}

// calls returns every call made so far.
func (c *client) calls() []call {
	c.mu.Lock()
	defer c.mu.Unlock()
	lines := c.proc.Lines()
	for ; c.read < len(lines); c.read++ {
		var cl call
		if err := json.Unmarshal([]byte(lines[c.read]), &cl); err == nil {
			c.all = append(c.all, cl)
		}
	}
	return append([]call(nil), c.all...)
}

// collect waits for n calls made after since and returns them.
func (c *client) collect(t *testing.T, since time.Time, n int, deadline time.Duration) []call {
	t.Helper()
	var got []call
	testwait.For(t, deadline, func() error {
		got = got[:0]
		for _, cl := range c.calls() {
			if cl.Time.After(since) {
				got = append(got, cl)
			}
		}
		if len(got) < n {
			return fmt.Errorf("%d of %d calls since %s", len(got), n, since.Format(time.RFC3339Nano))
		}
		return nil
	})
	return got[:n]
}

// tally counts calls by backend ("error:CODE" for failures).
func tally(calls []call) map[string]int {
	out := map[string]int{}
	for _, c := range calls {
		if c.Code != "OK" {
			out["error:"+c.Code]++
			continue
		}
		out[c.Backend]++
	}
	return out
}

func describe(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// writeFile writes atomically (temp file + rename), as editors and
// Kubernetes ConfigMap updates do.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
