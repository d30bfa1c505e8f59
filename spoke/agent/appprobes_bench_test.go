package agent

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/navemesh/nave/spoke/appprobe"
)

// benchProber is an AppProber of one probe of each kind against servers
// on loopback, and the agent's status server in front of it.
func benchProber(tb testing.TB) (agentURL string) {
	tb.Helper()
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	tb.Cleanup(app.Close)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go func() { _ = gs.Serve(lis) }()
	tb.Cleanup(gs.Stop)
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { tcp.Close() })
	go func() {
		for {
			c, err := tcp.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := func(a net.Addr) int { return a.(*net.TCPAddr).Port }
	p := NewAppProber(appprobe.Probers{
		appprobe.Path("web", appprobe.Liveness):  {HTTPGet: &appprobe.HTTPGet{Path: "/", Port: port(app.Listener.Addr())}, TimeoutSeconds: generous},
		appprobe.Path("web", appprobe.Readiness): {GRPC: &appprobe.GRPC{Port: port(lis.Addr())}, TimeoutSeconds: generous},
		appprobe.Path("web", appprobe.Startup):   {TCPSocket: &appprobe.TCPSocket{Port: port(tcp.Addr())}, TimeoutSeconds: generous},
	}, "127.0.0.1", discard(), nil)
	agent := httptest.NewServer(p)
	tb.Cleanup(agent.Close)
	return agent.URL
}

// probeOnce asks the agent for path as the kubelet does (a new connection).
func probeOnce(tb testing.TB, client *http.Client, url string) {
	resp, err := client.Get(url)
	if err != nil {
		tb.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("%s: %s", url, resp.Status)
	}
}

// BenchmarkAppProbe is one kubelet probe through the agent, end to end on
// loopback: the kubelet's request to the agent, the agent's probe of the
// app (HTTP GET, gRPC health Check with a new channel, TCP connect), the
// answer.
func BenchmarkAppProbe(b *testing.B) {
	url := benchProber(b)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for _, kind := range []string{appprobe.Liveness, appprobe.Readiness, appprobe.Startup} {
		name := map[string]string{appprobe.Liveness: "http", appprobe.Readiness: "grpc", appprobe.Startup: "tcp"}[kind]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				probeOnce(b, client, url+appprobe.Path("web", kind))
			}
		})
	}
}

// TestAppProbeBenchmarkOnce is BenchmarkAppProbe's test twin.
func TestAppProbeBenchmarkOnce(t *testing.T) {
	url := benchProber(t)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for _, kind := range appprobe.Kinds {
		probeOnce(t, client, url+appprobe.Path("web", kind))
	}
}
