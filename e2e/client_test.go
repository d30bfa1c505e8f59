package e2e

// Harness: the data plane the tests drive: echo backends, the
// nave-demo-client processes that call them, and what their calls show.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"sort"
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

// lastCalls waits for n calls after the ones seen so far and returns them.
func (c *client) lastCalls(t *testing.T, n int) []call {
	t.Helper()
	start := len(c.calls())
	var out []call
	testwait.For(t, 30*time.Second, func() error {
		all := c.calls()
		if len(all) < start+n {
			return fmt.Errorf("%d calls so far", len(all)-start)
		}
		out = all[len(all)-n:]
		return nil
	})
	return out
}

const echoHost = "echo.demo.svc.cluster.local"

// assertSplit checks that the share of calls served by want1 is p within
// five standard deviations of the binomial distribution (a false failure
// about once in 3.5 million runs), and that nothing else served a call.
func assertSplit(t *testing.T, calls []call, want1, want2 string, p float64) {
	t.Helper()
	got := tally(calls)
	n := float64(len(calls))
	if got[want1]+got[want2] != len(calls) {
		t.Fatalf("calls went outside %s/%s: %s", want1, want2, describe(got))
	}
	share := float64(got[want1]) / n
	tol := 5 * math.Sqrt(p*(1-p)/n)
	if math.Abs(share-p) > tol {
		t.Fatalf("%s served %.3f of %d calls, want %.2f±%.3f (%s)", want1, share, len(calls), p, tol, describe(got))
	}
	t.Logf("split over %d calls: %s (%s share %.3f, want %.2f±%.3f)", len(calls), describe(got), want1, share, p, tol)
}

// firstOK waits for the client's first successful call and returns its time.
func firstOK(t *testing.T, c *client, deadline time.Duration) time.Time {
	t.Helper()
	var at time.Time
	testwait.For(t, deadline, func() error {
		calls := c.calls()
		for _, cl := range calls {
			if cl.Code == "OK" {
				at = cl.Time
				return nil
			}
		}
		if len(calls) > 0 {
			last := calls[len(calls)-1]
			return fmt.Errorf("no successful call yet; last: %s %s", last.Code, last.Error)
		}
		return fmt.Errorf("no call yet")
	})
	return at
}

// failuresSince lists the calls made from a client's first successful one
// (from, firstOK's time) on that did not succeed. A call a client makes
// before its xDS resources have all arrived may fail ("no children to pick
// from"), as with any xDS server; the fallback tests judge what follows.
func failuresSince(calls []call, from time.Time) []call {
	var out []call
	for _, c := range calls {
		if c.Code != "OK" && !c.Time.Before(from) {
			out = append(out, c)
		}
	}
	return out
}

func httpGet(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b), err
}

// assertEchoRoutes checks the echo routing the foundation and Gateway API
// tests configure: plain's calls split 80/20 between echo-v1 and echo-v2,
// and every call of beta (x-user: beta) on echo-v3. The first successful
// call marks convergence; it measures after it.
func assertEchoRoutes(t *testing.T, plain, beta *client) {
	t.Helper()
	first := firstOK(t, plain, 30*time.Second)
	assertSplit(t, plain.collect(t, first, 600, 30*time.Second), "echo-v1", "echo-v2", 0.8)
	betaCalls := beta.collect(t, firstOK(t, beta, 30*time.Second), 100, 30*time.Second)
	if got := tally(betaCalls); got["echo-v3"] != len(betaCalls) {
		t.Fatalf("x-user: beta calls: %s, want all on echo-v3", describe(got))
	}
}
