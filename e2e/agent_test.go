package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/shared/typeurl"
)

// readChain parses the first certificate of a PEM chain.
func readChain(t *testing.T, chain, key []byte) *x509.Certificate {
	t.Helper()
	pair, err := tls.X509KeyPair(chain, key)
	if err != nil {
		t.Fatalf("the certificate and key do not make a pair: %v", err)
	}
	return pair.Leaf
}

// dialSDS opens an SDS stream to the agent's socket as Envoy does.
func dialSDS(t *testing.T, sock string) secretv3.SecretDiscoveryService_StreamSecretsClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// The agent is ready once its certificate and bootstrap are; its SDS
	// server creates the socket on a goroutine of its own: the stream
	// waits for the socket rather than failing while it does not exist.
	stream, err := secretv3.NewSecretDiscoveryServiceClient(conn).StreamSecrets(ctx, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

// sdsStream opens an SDS stream to the agent's socket as Envoy does and
// asks for default and ROOTCA.
func sdsStream(t *testing.T, sock string) secretv3.SecretDiscoveryService_StreamSecretsClient {
	t.Helper()
	stream := dialSDS(t, sock)
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "sidecar~127.0.0.1~web-1.demo~demo.svc.cluster.local"},
		TypeUrl: typeurl.Secret, ResourceNames: []string{"default", "ROOTCA"}}); err != nil {
		t.Fatal(err)
	}
	return stream
}

// nextSecrets receives one SDS response and ACKs it.
func nextSecrets(t *testing.T, stream secretv3.SecretDiscoveryService_StreamSecretsClient, timeout time.Duration) (*discoveryv3.DiscoveryResponse, map[string]*tlsv3.Secret) {
	t.Helper()
	type result struct {
		resp *discoveryv3.DiscoveryResponse
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		r, err := stream.Recv()
		ch <- result{r, err}
	}()
	var r result
	select {
	case r = <-ch:
	case <-time.After(timeout):
		t.Fatalf("no SDS response in %s", timeout)
	}
	if r.err != nil {
		t.Fatalf("SDS: %v", r.err)
	}
	out := map[string]*tlsv3.Secret{}
	for _, a := range r.resp.GetResources() {
		s := &tlsv3.Secret{}
		if err := a.UnmarshalTo(s); err != nil {
			t.Fatal(err)
		}
		out[s.GetName()] = s
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: typeurl.Secret, ResourceNames: []string{"default", "ROOTCA"},
		VersionInfo: r.resp.GetVersionInfo(), ResponseNonce: r.resp.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	return r.resp, out
}

// BenchmarkAgent starts nave-agent (grpc mode) as a pod would and measures
// the time from process start to ready (first certificate from the RA and
// the bootstrap written) and its resident memory once ready.
func BenchmarkAgent(b *testing.B) {
	a, h, raAddr, _ := agentWorld(b)
	for b.Loop() {
		runAgentBench(b, a, h, raAddr)
	}
}

// TestAgentBenchmarkOnce is BenchmarkAgent's test twin.
func TestAgentBenchmarkOnce(t *testing.T) {
	a, h, raAddr, _ := agentWorld(t)
	runAgentBench(t, a, h, raAddr)
}

func runAgentBench(t testing.TB, a *agent, h *hub, raAddr string) {
	env, _, status := agentEnv(t, a, h, raAddr, podEnv{name: "bench-1", namespace: "demo", sa: "client", mode: "grpc"}, t.TempDir())
	start := time.Now()
	p := harness.StartEnv(t, "agent-bench", binary("nave-agent"), env)
	testwait.For(t, 60*time.Second, func() error {
		if _, err := httpGet(fmt.Sprintf("http://127.0.0.1:%d/healthz/ready", status)); err != nil {
			return err
		}
		return nil
	})
	ready := time.Since(start)
	time.Sleep(time.Second) // let it settle: GC, idle connections
	rss, peak := currentRSS(p.PID()), peakRSS(p.PID())
	anon, file := statusMiB(p.PID(), "RssAnon:"), statusMiB(p.PID(), "RssFile:")
	if rss == 0 {
		t.Fatalf("no resident set for the agent (pid %d)", p.PID())
	}
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", status)
	heap, _ := metric(metricsURL, "go_memstats_heap_inuse_bytes")
	sys, _ := metric(metricsURL, "go_memstats_sys_bytes")
	p.Stop(10 * time.Second)
	t.Logf("nave-agent: ready (first certificate, bootstrap) %s after start; RSS %.1f MiB (anonymous %.1f, the binary's file pages %.1f), peak %.1f MiB; Go heap in use %.1f MiB, from the OS %.1f MiB",
		ready.Round(time.Millisecond), rss, anon, file, peak, heap/(1<<20), sys/(1<<20))
	if b, ok := t.(*testing.B); ok {
		b.ReportMetric(ready.Seconds()*1000, "ms-to-ready")
		b.ReportMetric(rss, "MiB-rss")
		b.ReportMetric(anon, "MiB-rss-anon")
		b.ReportMetric(peak, "MiB-peak-rss")
	}
}

// TestAgentInAPod is issue 13's proof of the per-pod agent: nave-agent
// runs as a process given exactly what an injected pod gives it (env,
// downward-API files, a TokenRequest token from a real API server); it
// gets its certificate from the spoke's RA, serves it to an SDS client
// speaking as Envoy and renews it, and in grpc mode its bootstrap and files
// alone let a grpc-go xDS server and the demo client talk mTLS through the
// hub, with an AuthorizationPolicy DENY applied.
func TestAgentInAPod(t *testing.T) {
	a, h, raAddr, lis := agentWorld(t)
	meshRoot := a.meshRoot

	t.Run("envoy mode: SDS, bootstrap and renewal", func(t *testing.T) {
		p := startAgent(t, a, h, raAddr, podEnv{name: "web-1", namespace: "demo", sa: "client", mode: "envoy",
			labels: map[string]string{"app": "web"}, extra: []string{"NAVE_RA_CERT_TTL=20s"}})
		stream := sdsStream(t, filepath.Join(p.dir, "sds.sock"))
		resp, secrets := nextSecrets(t, stream, 30*time.Second)
		def, roots := secrets["default"].GetTlsCertificate(), secrets["ROOTCA"].GetValidationContext()
		if def == nil || roots == nil || len(secrets) != 2 {
			t.Fatalf("SDS answered %v; want default (a certificate) and ROOTCA (a validation context)", secrets)
		}
		leaf := readChain(t, def.GetCertificateChain().GetInlineBytes(), def.GetPrivateKey().GetInlineBytes())
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(roots.GetTrustedCa().GetInlineBytes())
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil ||
			leaf.URIs[0].String() != "spiffe://cluster.local/ns/demo/sa/client" {
			t.Fatalf("default is %v (%v); want the pod's identity, chaining to ROOTCA", leaf.URIs, err)
		}
		if string(roots.GetTrustedCa().GetInlineBytes()) != string(meshRoot) {
			t.Error("ROOTCA is not the mesh's root")
		}
		// The agent keeps no key on disk in envoy mode.
		entries, _ := os.ReadDir(p.dir)
		for _, e := range entries {
			if b, _ := os.ReadFile(filepath.Join(p.dir, e.Name())); strings.Contains(string(b), "PRIVATE KEY") {
				t.Errorf("%s holds a private key", e.Name())
			}
		}
		// The bootstrap is a valid Envoy bootstrap naming the pod.
		doc, err := os.ReadFile(filepath.Join(p.dir, "envoy-bootstrap.json"))
		if err != nil {
			t.Fatal(err)
		}
		b := &bootstrapv3.Bootstrap{}
		if err := protojson.Unmarshal(doc, b); err != nil {
			t.Fatalf("envoy-bootstrap.json: %v", err)
		}
		if err := b.ValidateAll(); err != nil {
			t.Fatalf("envoy-bootstrap.json does not validate: %v", err)
		}
		if b.GetNode().GetId() != "sidecar~127.0.0.1~web-1.demo~demo.svc.cluster.local" ||
			b.GetNode().GetMetadata().GetFields()["LABELS"].GetStructValue().GetFields()["app"].GetStringValue() != "web" {
			t.Errorf("node %v; want the pod's id and labels", b.GetNode())
		}
		if got := b.GetNode().GetMetadata().GetFields()["SDS_CLUSTER"].GetStringValue(); got != "sds-grpc" {
			t.Errorf("node metadata SDS_CLUSTER = %q; want sds-grpc, so that the hub points workload secrets at the agent", got)
		}
		var view struct{ Identity, Serial string }
		if err := harness.GetJSON(p.url("/debug/certificate"), &view); err != nil || view.Serial != leaf.SerialNumber.Text(16) {
			t.Errorf("/debug/certificate: %+v (%v); want serial %s", view, err, leaf.SerialNumber.Text(16))
		}

		// The certificate lives 20 s: the agent renews it with a new key and
		// pushes it on the open stream.
		resp2, secrets2 := nextSecrets(t, stream, 60*time.Second)
		def2 := secrets2["default"].GetTlsCertificate()
		leaf2 := readChain(t, def2.GetCertificateChain().GetInlineBytes(), def2.GetPrivateKey().GetInlineBytes())
		if resp2.GetVersionInfo() == resp.GetVersionInfo() || leaf2.SerialNumber.Cmp(leaf.SerialNumber) == 0 ||
			string(def2.GetPrivateKey().GetInlineBytes()) == string(def.GetPrivateKey().GetInlineBytes()) {
			t.Fatalf("the push after renewal carries version %s, serial %s; want a new certificate and key", resp2.GetVersionInfo(), leaf2.SerialNumber.Text(16))
		}
		if leaf2.URIs[0].String() != leaf.URIs[0].String() {
			t.Errorf("renewed for %v", leaf2.URIs)
		}
		assertMetricsDocumented(t, p.url("/metrics"))
		// The keeper counts a renewal after the push the test saw: wait for it.
		testwait.For(t, 30*time.Second, func() error {
			metrics, err := httpGet(p.url("/metrics"))
			if err != nil {
				return err
			}
			for _, m := range []string{"nave_agent_certificate_renewals_total 2", "nave_agent_sds_pushes_total 2"} {
				if !strings.Contains(metrics, m) {
					return fmt.Errorf("metrics lack %q", m)
				}
			}
			return nil
		})
	})

	t.Run("grpc mode: mTLS through the hub with only the agent's files", func(t *testing.T) {
		server := startAgent(t, a, h, raAddr, podEnv{name: "echo-1", namespace: "demo", sa: "server", mode: "grpc", labels: map[string]string{"app": "echo"}})
		cl := startAgent(t, a, h, raAddr, podEnv{name: "client-1", namespace: "demo", sa: "client", mode: "grpc", labels: map[string]string{"app": "client"}})
		for _, d := range []string{server.dir, cl.dir} {
			fi, err := os.Stat(filepath.Join(d, "key.pem"))
			if err != nil || fi.Mode().Perm() != 0o644 {
				t.Fatalf("key.pem: %v (%v); want mode 0644 (app containers run as other users)", fi, err)
			}
		}
		boot, err := os.ReadFile(filepath.Join(server.dir, "grpc-bootstrap.json"))
		if err != nil {
			t.Fatal(err)
		}
		serveEcho(t, lis, boot)
		const target = "xds:///echo.demo.svc.cluster.local:7070"
		clientArgs := []string{"--target", target, "--bootstrap", filepath.Join(cl.dir, "grpc-bootstrap.json"), "--interval", "50ms", "--timeout", "2s", "--json"}
		ok := &client{proc: harness.Start(t, "client-agent", binary("nave-demo-client"), clientArgs...)}
		for _, call := range ok.lastCalls(t, 5) {
			if call.Code != "OK" || call.Backend != "spiffe://cluster.local/ns/demo/sa/client" {
				t.Fatalf("call %+v; want OK, the server seeing the client's SPIFFE ID", call)
			}
		}
		// The hub (sds.mintKeys off) mints no key: asked for secrets and
		// then clusters on one stream, it answers the clusters alone.
		pair, err := tls.LoadX509KeyPair(filepath.Join(cl.dir, "cert-chain.pem"), filepath.Join(cl.dir, "key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		ads, err := discoveryv3.NewAggregatedDiscoveryServiceClient(dialTLS(t, addr(h.xds), h.servingRoots(t), &pair)).StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		envoyNode := &corev3.Node{Id: "sidecar~127.0.0.1~client-1.demo~demo.svc.cluster.local"}
		for _, req := range []*discoveryv3.DiscoveryRequest{{Node: envoyNode, TypeUrl: typeurl.Secret, ResourceNames: []string{"default", "ROOTCA"}}, {TypeUrl: typeurl.Cluster}} {
			if err := ads.Send(req); err != nil {
				t.Fatal(err)
			}
		}
		if first, err := ads.Recv(); err != nil || first.GetTypeUrl() != typeurl.Cluster {
			t.Errorf("the hub answered %s (%v) first; want clusters, and no secrets without sds.mintKeys", first.GetTypeUrl(), err)
		}

		blocked := &client{proc: harness.Start(t, "client-agent-blocked", binary("nave-demo-client"), append(clientArgs, "--header", "x-block=yes")...)}
		for _, call := range blocked.lastCalls(t, 3) {
			if call.Code != codes.PermissionDenied.String() {
				t.Fatalf("call with x-block: %+v; want PermissionDenied", call)
			}
		}
	})

	t.Run("app probes: the kubelet's rewritten probes reach the app", func(t *testing.T) {
		// The pod's app: an HTTP server, a gRPC health server and a TCP
		// port, on the pod's address (127.0.0.1 here).
		healthy := make(chan struct{}) // closed: /healthz answers 500
		mux := http.NewServeMux()
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-healthy:
				w.WriteHeader(http.StatusInternalServerError)
			default:
				if r.Header.Get("X-Probe") != "kubelet" {
					w.WriteHeader(http.StatusBadRequest)
				}
			}
		})
		web := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		webLis := listenLoopback(t)
		go func() { _ = web.Serve(webLis) }()
		defer web.Close()
		grpcLis := listenLoopback(t)
		hs := health.NewServer()
		hs.SetServingStatus("shop.Cart", healthpb.HealthCheckResponse_SERVING)
		gs := grpc.NewServer()
		healthpb.RegisterHealthServer(gs, hs)
		go func() { _ = gs.Serve(grpcLis) }()
		defer gs.Stop()
		tcpLis := listenLoopback(t)
		go func() {
			for {
				c, err := tcpLis.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		port := func(l net.Listener) int { return l.Addr().(*net.TCPAddr).Port }
		probes := fmt.Sprintf(`{"/app-health/web/livez":{"httpGet":{"path":"/healthz","port":%d,"scheme":"HTTP","httpHeaders":[{"name":"X-Probe","value":"kubelet"}]},"timeoutSeconds":20},`+
			`"/app-health/web/readyz":{"grpc":{"port":%d,"service":"shop.Cart"},"timeoutSeconds":20},"/app-health/web/startupz":{"tcpSocket":{"port":%d},"timeoutSeconds":20}}`,
			port(webLis), port(grpcLis), port(tcpLis))
		p := startAgent(t, a, h, raAddr, podEnv{name: "shop-1", namespace: "demo", sa: "client", mode: "envoy", extra: []string{"NAVE_APP_PROBES=" + probes}})
		status := func(path string) (int, string) {
			resp, err := http.Get(p.url(path))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		for _, path := range []string{"/app-health/web/livez", "/app-health/web/readyz", "/app-health/web/startupz"} {
			if code, body := status(path); code != http.StatusOK {
				t.Errorf("%s: %d %q; want 200 while the app is healthy", path, code, body)
			}
		}
		for _, path := range []string{"/app-health/other/livez", "/app-health/web/deadz", "/app-health/web/livez/x"} {
			if code, _ := status(path); code != http.StatusNotFound {
				t.Errorf("%s: %d; want 404: the injector defined no such probe", path, code)
			}
		}
		// The app turns unhealthy, then stops: the probes fail.
		close(healthy)
		hs.SetServingStatus("shop.Cart", healthpb.HealthCheckResponse_NOT_SERVING)
		for _, c := range []struct{ path, want string }{{"/app-health/web/livez", "failure: HTTP 500"}, {"/app-health/web/readyz", "failure: gRPC health NOT_SERVING"}} {
			if code, body := status(c.path); code != http.StatusServiceUnavailable || !strings.Contains(body, c.want) {
				t.Errorf("%s: %d %q; want 503 with %q", c.path, code, body, c.want)
			}
		}
		web.Close()
		gs.Stop()
		tcpLis.Close()
		for _, path := range []string{"/app-health/web/livez", "/app-health/web/readyz", "/app-health/web/startupz"} {
			testwait.For(t, 30*time.Second, func() error {
				if code, body := status(path); code != http.StatusServiceUnavailable || !strings.Contains(body, "error: ") {
					return fmt.Errorf("%s: %d %q; want 503, the app unreachable", path, code, body)
				}
				return nil
			})
		}
		metrics, err := httpGet(p.url("/metrics"))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range []string{`nave_agent_app_probes_total{kind="http",result="success"} 1`, `nave_agent_app_probes_total{kind="http",result="failure"} 1`,
			`nave_agent_app_probes_total{kind="grpc",result="success"} 1`, `nave_agent_app_probes_total{kind="tcp",result="success"} 1`} {
			if !strings.Contains(metrics, m) {
				t.Errorf("metrics lack %q", m)
			}
		}
		assertMetricsDocumented(t, p.url("/metrics"))
		var view map[string]any
		if err := harness.GetJSON(p.url("/debug/app-probes"), &view); err != nil || len(view) != 3 {
			t.Errorf("/debug/app-probes: %v (%v); want the three probes", view, err)
		}
	})

	t.Run("envoy child", func(t *testing.T) {
		work := t.TempDir()
		// A fake Envoy: it records its arguments (whole, by a rename: the
		// test reads them as soon as they exist) and SIGTERM (its trap set
		// first), and serves nothing; a second one dies at once.
		fake := filepath.Join(work, "envoy")
		if err := os.WriteFile(fake, []byte("#!/bin/sh\ntrap 'echo term > \"$0.term\"; exit 0' TERM\necho \"$@\" > \"$0.args.new\" && mv \"$0.args.new\" \"$0.args\"\nwhile :; do sleep 0.1; done\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		env, dir, status := agentEnv(t, a, h, raAddr, podEnv{name: "web-2", namespace: "demo", sa: "client", mode: "envoy"}, work)
		p := harness.StartEnv(t, "agent-child", binary("nave-agent"), append(env, "NAVE_ENVOY_BINARY="+fake), "run") // "nave-agent run" is "nave-agent"
		testwait.For(t, 30*time.Second, func() error {
			args, err := os.ReadFile(fake + ".args")
			if err != nil {
				return err
			}
			// envoy.drainDuration's default (Istio's terminationDrainDuration, 5 s).
			if want := "-c " + filepath.Join(dir, "envoy-bootstrap.json") + " --drain-time-s 5 --drain-strategy immediate"; strings.TrimSpace(string(args)) != want {
				t.Fatalf("envoy ran with %q; want %q", args, want)
			}
			return nil
		})
		// Envoy's admin does not answer: the agent is not ready.
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz/ready", status))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("ready while Envoy's admin does not answer")
		}
		// Stopping drains first: the fake's admin does not answer, so the
		// agent waits the whole drain duration, then sends SIGTERM.
		p.Stop(30 * time.Second)
		if term, err := os.ReadFile(fake + ".term"); err != nil || strings.TrimSpace(string(term)) != "term" {
			t.Errorf("envoy did not get SIGTERM after the drain (%v)", err)
		}
		if p.ExitCode() != 0 {
			t.Errorf("agent exited %d after SIGTERM; want 0", p.ExitCode())
		}

		dying := filepath.Join(work, "dying-envoy")
		if err := os.WriteFile(dying, []byte("#!/bin/sh\nexit 3\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		env, _, _ = agentEnv(t, a, h, raAddr, podEnv{name: "web-3", namespace: "demo", sa: "client", mode: "envoy"}, t.TempDir())
		d := harness.StartEnv(t, "agent-dying", binary("nave-agent"), append(env, "NAVE_ENVOY_BINARY="+dying))
		select {
		case <-d.Done():
		case <-time.After(60 * time.Second):
			t.Fatal("the agent still runs after Envoy died")
		}
		if d.ExitCode() == 0 || !strings.Contains(d.Log(), "envoy exited: exit status 3") {
			t.Errorf("agent exited %d; want non-zero with the reason \"envoy exited: exit status 3\" logged", d.ExitCode())
		}
	})
}

// listenLoopback is a listener on a free loopback port, closed when t ends.
func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}
