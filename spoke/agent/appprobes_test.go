package agent

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/navemesh/nave/spoke/appprobe"
)

// generous is the timeout of the probes that are not about timing out:
// far beyond what a loopback answer takes on a loaded machine.
const generous = 20

// portOf is the port of a listener's address or a server URL.
func portOf(t *testing.T, hostport string) int {
	t.Helper()
	if u, err := url.Parse(hostport); err == nil && u.Host != "" {
		hostport = u.Host
	}
	_, p, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := portOf(t, l.Addr().String())
	l.Close()
	return p
}

// ask runs the prober for path as the kubelet would and returns the status
// and body.
func ask(p *AppProber, method, path string) (int, string) {
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Code, rec.Body.String()
}

func TestAppProbeHTTP(t *testing.T) {
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	var lastRemote, lastAgent, lastHeader, lastHost string
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		lastRemote, lastAgent, lastHeader, lastHost = r.RemoteAddr, r.UserAgent(), r.Header.Get("X-Probe"), r.Host
	})
	mux.HandleFunc("/bad", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	mux.HandleFunc("/here", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/bad", http.StatusFound) })
	mux.HandleFunc("/away", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://198.51.100.7:1/bad", http.StatusFound) // off the pod: never followed
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	})
	app := httptest.NewServer(mux)
	defer app.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	defer other.Close()
	mux.HandleFunc("/port", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, other.URL+"/", http.StatusFound) })
	tlsApp := httptest.NewTLSServer(mux)
	defer tlsApp.Close()
	port, tlsPort, down := portOf(t, app.URL), portOf(t, tlsApp.URL), closedPort(t)
	get := func(path string, port int) *appprobe.Prober {
		return &appprobe.Prober{HTTPGet: &appprobe.HTTPGet{Path: path, Port: port}, TimeoutSeconds: generous}
	}
	probers := appprobe.Probers{
		appprobe.Path("web", appprobe.Liveness): {HTTPGet: &appprobe.HTTPGet{Path: "/ok", Port: port,
			HTTPHeaders: []appprobe.Header{{Name: "X-Probe", Value: "yes"}, {Name: "Host", Value: "web.local"}}}, TimeoutSeconds: generous},
		appprobe.Path("web", appprobe.Readiness): get("/bad", port),
		appprobe.Path("web", appprobe.Startup):   get("/here", port),
		appprobe.Path("away", appprobe.Liveness): get("/away", port),
		appprobe.Path("port", appprobe.Liveness): get("/port", port),
		appprobe.Path("slow", appprobe.Liveness): {HTTPGet: &appprobe.HTTPGet{Path: "/slow", Port: port}, TimeoutSeconds: 1},
		appprobe.Path("down", appprobe.Liveness): get("/ok", down),
		appprobe.Path("tls", appprobe.Liveness):  {HTTPGet: &appprobe.HTTPGet{Path: "/ok", Port: tlsPort, Scheme: appprobe.SchemeHTTPS}, TimeoutSeconds: generous},
	}
	reg := prometheus.NewRegistry()
	p := NewAppProber(probers, "127.0.0.1", discard(), reg)

	code, body := ask(p, http.MethodGet, "/app-health/web/livez")
	if code != http.StatusOK || !strings.Contains(body, "HTTP 200") {
		t.Fatalf("livez: %d %q; want 200", code, body)
	}
	if host, _, _ := net.SplitHostPort(lastRemote); host != "127.0.0.6" {
		t.Errorf("the app saw the probe from %s; want the passthrough source 127.0.0.6, which the capture leaves alone", lastRemote)
	}
	if lastHeader != "yes" || lastHost != "web.local" || !strings.HasPrefix(lastAgent, "kube-probe/") {
		t.Errorf("the app got X-Probe %q, Host %q, User-Agent %q; want the probe's headers and a kube-probe agent", lastHeader, lastHost, lastAgent)
	}
	for _, c := range []struct {
		path string
		code int
		want string
	}{
		{"/app-health/web/readyz", http.StatusServiceUnavailable, "failure: HTTP 500"},
		{"/app-health/web/startupz", http.StatusServiceUnavailable, "failure: HTTP 500"}, // the redirect on the pod was followed
		{"/app-health/away/livez", http.StatusOK, "HTTP 302"},
		{"/app-health/port/livez", http.StatusServiceUnavailable, "failure: HTTP 418"}, // same host, another port: followed, as in Kubernetes                            // not followed off the pod; 3xx passes, as in Kubernetes
		{"/app-health/slow/livez", http.StatusServiceUnavailable, "error: no answer within the probe's timeoutSeconds"},
		{"/app-health/down/livez", http.StatusServiceUnavailable, "error: "},
		{"/app-health/tls/livez", http.StatusOK, "HTTP 200"},
		{"/app-health/web/other", http.StatusNotFound, "no such app probe"},
		{"/app-health/nobody/livez", http.StatusNotFound, "no such app probe"},
		{"/app-health/web/livez/", http.StatusNotFound, "no such app probe"},
		{"/healthz/ready", http.StatusNotFound, "no such app probe"},
	} {
		if code, body := ask(p, http.MethodGet, c.path); code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %q; want %d with %q", c.path, code, body, c.code, c.want)
		}
	}
	if code, _ := ask(p, http.MethodPost, "/app-health/web/livez"); code != http.StatusNotFound {
		t.Errorf("POST: %d; want 404", code)
	}
	for _, c := range []struct {
		result string
		want   float64
	}{{probeSuccess, 3}, {probeFailure, 3}, {probeError, 2}} {
		if got := testutil.ToFloat64(p.total.WithLabelValues("http", c.result)); got != c.want {
			t.Errorf("nave_agent_app_probes_total{kind=http,result=%s} = %v; want %v", c.result, got, c.want)
		}
	}
}

func TestAppProbeGRPC(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := health.NewServer()
	hs.SetServingStatus("shop.Cart", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("shop.Pay", healthpb.HealthCheckResponse_NOT_SERVING)
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	port := portOf(t, lis.Addr().String())
	svc := func(s string) *string { return &s }
	p := NewAppProber(appprobe.Probers{
		appprobe.Path("cart", appprobe.Readiness): {GRPC: &appprobe.GRPC{Port: port, Service: svc("shop.Cart")}, TimeoutSeconds: generous},
		appprobe.Path("all", appprobe.Readiness):  {GRPC: &appprobe.GRPC{Port: port}, TimeoutSeconds: generous},
		appprobe.Path("pay", appprobe.Readiness):  {GRPC: &appprobe.GRPC{Port: port, Service: svc("shop.Pay")}, TimeoutSeconds: generous},
		appprobe.Path("none", appprobe.Readiness): {GRPC: &appprobe.GRPC{Port: port, Service: svc("shop.None")}, TimeoutSeconds: generous},
		appprobe.Path("down", appprobe.Readiness): {GRPC: &appprobe.GRPC{Port: closedPort(t)}, TimeoutSeconds: 2},
	}, "127.0.0.1", discard(), nil)
	for _, c := range []struct {
		path string
		code int
		want string
	}{
		{"/app-health/cart/readyz", http.StatusOK, `SERVING of service "shop.Cart"`},
		{"/app-health/all/readyz", http.StatusOK, `SERVING of service ""`},
		{"/app-health/pay/readyz", http.StatusServiceUnavailable, "failure: gRPC health NOT_SERVING"},
		{"/app-health/none/readyz", http.StatusServiceUnavailable, "error: "},
		{"/app-health/down/readyz", http.StatusServiceUnavailable, "error: "},
	} {
		if code, body := ask(p, http.MethodGet, c.path); code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %q; want %d with %q", c.path, code, body, c.code, c.want)
		}
	}
	// the app stops serving: the probe fails
	hs.SetServingStatus("shop.Cart", healthpb.HealthCheckResponse_NOT_SERVING)
	if code, body := ask(p, http.MethodGet, "/app-health/cart/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("after NOT_SERVING: %d %q; want 503", code, body)
	}
	if got := testutil.ToFloat64(p.total.WithLabelValues("grpc", probeSuccess)); got != 2 {
		t.Errorf("grpc successes %v; want 2", got)
	}
}

func TestAppProbeTCP(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	p := NewAppProber(appprobe.Probers{
		appprobe.Path("db", appprobe.Liveness):   {TCPSocket: &appprobe.TCPSocket{Port: portOf(t, lis.Addr().String())}, TimeoutSeconds: generous},
		appprobe.Path("lo", appprobe.Liveness):   {TCPSocket: &appprobe.TCPSocket{Port: portOf(t, lis.Addr().String()), Host: "localhost"}, TimeoutSeconds: generous},
		appprobe.Path("down", appprobe.Liveness): {TCPSocket: &appprobe.TCPSocket{Port: closedPort(t)}, TimeoutSeconds: generous},
	}, "", discard(), nil)
	for path, code := range map[string]int{"/app-health/db/livez": 200, "/app-health/lo/livez": 200, "/app-health/down/livez": 503} {
		if got, body := ask(p, http.MethodGet, path); got != code {
			t.Errorf("%s: %d %q; want %d", path, got, body, code)
		}
	}
}

func TestAppProbeTarget(t *testing.T) {
	for _, c := range []struct {
		podIP, host, addr string
		passthrough       bool
	}{
		{"10.1.2.3", "", "10.1.2.3:80", true},
		{"", "", "127.0.0.1:80", true},
		{"fd00::5", "", "[::1]:80", false},
		{"10.1.2.3", "localhost", "127.0.0.1:80", true},
		{"10.1.2.3", "::1", "[::1]:80", false},
		{"10.1.2.3", "[::1]", "[::1]:80", false},
	} {
		p := NewAppProber(nil, c.podIP, discard(), nil)
		addr, src := p.target(c.host, 80)
		if addr != c.addr || (src != nil) != c.passthrough {
			t.Errorf("pod %q host %q: %s from %v; want %s (passthrough %v)", c.podIP, c.host, addr, src, c.addr, c.passthrough)
		}
	}
}
