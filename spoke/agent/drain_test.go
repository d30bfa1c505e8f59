package agent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/spoke/agentconfig"
)

// fakeAdmin is Envoy's admin as the drain uses it, on a real loopback
// HTTP server: it records the requests and answers
// server.total_connections from counts, one per stats request (the last
// one repeats).
type fakeAdmin struct {
	srv *httptest.Server

	mu       sync.Mutex
	requests []string
	counts   []int
}

func newFakeAdmin(t *testing.T, counts ...int) *fakeAdmin {
	t.Helper()
	a := &fakeAdmin{counts: counts}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.requests = append(a.requests, r.Method+" "+r.URL.RequestURI())
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/drain_listeners" && r.URL.Query().Has("graceful"):
			_, _ = w.Write([]byte("OK\n"))
		case r.Method == http.MethodGet && r.URL.Path == "/stats" && r.URL.Query().Get("filter") == `^server\.total_connections$`:
			n := a.counts[0]
			if len(a.counts) > 1 {
				a.counts = a.counts[1:]
			}
			fmt.Fprintf(w, "server.total_connections: %d\n", n)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *fakeAdmin) port() int { return a.srv.Listener.Addr().(*net.TCPAddr).Port }

func (a *fakeAdmin) log() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.requests...)
}

func TestDrainEndsWhenEnvoyHasNoConnectionLeft(t *testing.T) {
	admin := newFakeAdmin(t, 3, 2, 0)
	synctest.Test(t, func(t *testing.T) {
		e := &Envoy{AdminPort: admin.port(), Drain: 30 * time.Second, DrainPoll: time.Second, Log: discard()}
		start := time.Now()
		e.DrainConnections(context.Background())
		// Counted at once (3), after one poll (2), after two (0).
		if took := time.Since(start); took != 2*time.Second {
			t.Errorf("drain took %s; want 2s (until the connections reached zero)", took)
		}
	})
	got := admin.log()
	if len(got) != 4 || got[0] != "POST /drain_listeners?graceful" {
		t.Fatalf("admin requests %q; want the graceful drain first, then three counts", got)
	}
}

func TestDrainWaitsTheDurationWhileConnectionsRemain(t *testing.T) {
	admin := newFakeAdmin(t, 5)
	synctest.Test(t, func(t *testing.T) {
		e := &Envoy{AdminPort: admin.port(), Drain: 7 * time.Second, Log: discard()}
		start := time.Now()
		e.DrainConnections(context.Background())
		if took := time.Since(start); took != 7*time.Second {
			t.Errorf("drain took %s; want the drain duration, 7s", took)
		}
	})
	if got := admin.log(); got[0] != "POST /drain_listeners?graceful" || len(got) < 7 {
		t.Fatalf("admin requests %q; want the graceful drain, then a count every second", got)
	}
}

func TestDrainWithoutAnAdminWaitsTheDuration(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	lis.Close() // nothing listens: every admin request fails at once
	synctest.Test(t, func(t *testing.T) {
		e := &Envoy{AdminPort: port, Drain: 3 * time.Second, Log: discard()}
		start := time.Now()
		e.DrainConnections(context.Background())
		if took := time.Since(start); took != 3*time.Second {
			t.Errorf("drain took %s; want the drain duration, 3s", took)
		}
	})
}

// TestEnvoyChildDrainedBeforeSIGTERM runs a fake Envoy: stopping the agent
// asks the admin to drain, and only then sends SIGTERM; Envoy was started
// with the drain time.
func TestEnvoyChildDrainedBeforeSIGTERM(t *testing.T) {
	admin := newFakeAdmin(t, 0)
	bin := fakeEnvoy(t, "trap 'echo term > \"$0.term\"; exit 0' TERM\necho \"$@\" > \"$0.args\"\nwhile :; do sleep 0.05; done\n")
	e := &Envoy{Binary: bin, Bootstrap: "/run/boot.json", AdminPort: admin.port(), Grace: 10 * time.Second,
		Drain: 45 * time.Second, Log: discard()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	testwait.Until(t, "envoy started", func() bool {
		b, err := os.ReadFile(bin + ".args")
		return err == nil && strings.TrimSpace(string(b)) == "-c /run/boot.json --drain-time-s 45 --drain-strategy immediate"
	})
	if got := admin.log(); len(got) != 0 {
		t.Fatalf("the admin was asked %q before the agent stopped", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after the context ended: %v; want nil", err)
	}
	if got := admin.log(); len(got) != 2 || got[0] != "POST /drain_listeners?graceful" {
		t.Errorf("admin requests %q; want the graceful drain and one count (zero)", got)
	}
	if b, err := os.ReadFile(bin + ".term"); err != nil || strings.TrimSpace(string(b)) != "term" {
		t.Errorf("envoy did not get SIGTERM after draining (%v)", err)
	}
}

// TestDrainExitOnZeroFalseWaitsTheDuration: EXIT_ON_ZERO_ACTIVE_CONNECTIONS
// false is Istio's default: the whole drain duration, connections or not.
func TestDrainExitOnZeroFalseWaitsTheDuration(t *testing.T) {
	admin := newFakeAdmin(t, 0)
	no := false
	synctest.Test(t, func(t *testing.T) {
		e := &Envoy{AdminPort: admin.port(), Drain: 4 * time.Second, ExitOnZero: &no, Log: discard()}
		start := time.Now()
		e.DrainConnections(context.Background())
		if took := time.Since(start); took != 4*time.Second {
			t.Errorf("drain took %s; want the whole drain duration, 4s", took)
		}
	})
	if got := admin.log(); len(got) != 1 || got[0] != "POST /drain_listeners?graceful" {
		t.Errorf("admin requests %q; want the graceful drain only (no connection count)", got)
	}
}

// TestDrainExitOnZeroTrue: EXIT_ON_ZERO_ACTIVE_CONNECTIONS true is
// Istio's: MINIMUM_DRAIN_DURATION first, then until no connection is
// left, past the drain duration.
func TestDrainExitOnZeroTrue(t *testing.T) {
	admin := newFakeAdmin(t, 4, 3, 0)
	yes := true
	synctest.Test(t, func(t *testing.T) {
		e := &Envoy{AdminPort: admin.port(), Drain: time.Second, ExitOnZero: &yes, MinDrain: 3 * time.Second, Log: discard()}
		start := time.Now()
		e.DrainConnections(context.Background())
		// 3s at least, then counted at once (4), after one poll (3), after two (0).
		if took := time.Since(start); took != 5*time.Second {
			t.Errorf("drain took %s; want 5s (the minimum, then until the connections reached zero)", took)
		}
	})
	if got := admin.log(); len(got) != 4 || got[0] != "POST /drain_listeners?graceful" {
		t.Errorf("admin requests %q; want the graceful drain, then three counts", got)
	}
}

// TestDrainExitOnZeroTrueWithoutAnAdmin: an admin that does not answer
// ends an EXIT_ON_ZERO_ACTIVE_CONNECTIONS drain after the minimum, as
// Istio's pilot-agent does (the connections cannot be known).
func TestDrainExitOnZeroTrueWithoutAnAdmin(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	lis.Close()
	yes := true
	synctest.Test(t, func(t *testing.T) {
		e := &Envoy{AdminPort: port, Drain: 30 * time.Second, ExitOnZero: &yes, Log: discard()}
		start := time.Now()
		e.DrainConnections(context.Background())
		if took := time.Since(start); took != DefaultMinDrain {
			t.Errorf("drain took %s; want the default minimum, %s", took, DefaultMinDrain)
		}
	})
}

func TestDrainMetadata(t *testing.T) {
	for _, tc := range []struct {
		metadata string
		exit     string // "", "true", "false"
		least    time.Duration
		err      string
	}{
		{"", "", 0, ""},
		{`{"EXIT_ON_ZERO_ACTIVE_CONNECTIONS": "true", "MINIMUM_DRAIN_DURATION": "2s"}`, "true", 2 * time.Second, ""},
		{`{"EXIT_ON_ZERO_ACTIVE_CONNECTIONS": "false"}`, "false", 0, ""},
		{`{"EXIT_ON_ZERO_ACTIVE_CONNECTIONS": "yes please"}`, "", 0, "EXIT_ON_ZERO_ACTIVE_CONNECTIONS"},
		{`{"MINIMUM_DRAIN_DURATION": "-1s"}`, "", 0, "MINIMUM_DRAIN_DURATION"},
	} {
		exit, least, err := drainMetadata(agentconfig.Config{ProxyMetadata: tc.metadata})
		got := ""
		if exit != nil {
			got = strconv.FormatBool(*exit)
		}
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) || got != tc.exit || least != tc.least {
			t.Errorf("%s: exit %q, minimum %s, err %v; want %q, %s, error with %q", tc.metadata, got, least, err, tc.exit, tc.least, tc.err)
		}
	}
}
