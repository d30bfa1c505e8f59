package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/navemesh/nave/spoke/appprobe"
)

// Results of an app probe (nave_agent_app_probes_total's result label).
const (
	probeSuccess = "success" // the app answered healthy
	probeFailure = "failure" // the app answered unhealthy
	probeError   = "error"   // the app could not be reached or did not answer in time
)

// maxProbeBody is how much of an HTTP probe's response body is read
// (Kubernetes reads 10 KiB).
const maxProbeBody = 10 << 10

// maxProbeRedirects is how many redirects on the pod an HTTP probe follows
// (Kubernetes': 10).
const maxProbeRedirects = 10

// passthroughSource is the source address of the agent's probes to the
// pod's IP: the capture leaves loopback traffic from it alone (Envoy's
// inbound passthrough address, Istio's), so a probe reaches the app
// directly instead of Envoy's inbound listener.
var passthroughSource = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 6)}

// AppProber answers the rewritten probes of the pod's app containers
// (decision 032): for each path the injector gave it, it runs the original
// probe against the pod — never against anything a request names — and
// answers 200 when it passes, 503 when it fails, 404 for any other path.
// It is safe for concurrent use; it holds no state between probes but its
// metrics.
type AppProber struct {
	probers appprobe.Probers
	podIP   net.IP
	log     *slog.Logger
	total   *prometheus.CounterVec
}

// NewAppProber returns the prober of probers (appprobe.Parse's), for a pod
// at podIP ("" when unknown); reg receives nave_agent_app_probes_total.
func NewAppProber(probers appprobe.Probers, podIP string, log *slog.Logger, reg prometheus.Registerer) *AppProber {
	p := &AppProber{probers: probers, podIP: net.ParseIP(podIP), log: log,
		total: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_agent_app_probes_total",
			Help: "probes of the app containers the agent ran for the kubelet's rewritten probes, by kind (http, grpc, tcp) and result (success, failure: the app answered unhealthy, error: unreachable or too slow)"},
			[]string{"kind", "result"})}
	for _, k := range []string{"http", "grpc", "tcp"} {
		for _, r := range []string{probeSuccess, probeFailure, probeError} {
			p.total.WithLabelValues(k, r)
		}
	}
	if reg != nil {
		reg.MustRegister(p.total)
	}
	return p
}

// ServeHTTP answers GET /app-health/<container>/<kind>.
func (p *AppProber) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	pr, ok := p.probers[r.URL.Path]
	if !ok || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		http.Error(w, "no such app probe: the injector rewrote none at "+strconv.Quote(r.URL.Path), http.StatusNotFound)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Duration(pr.Timeout())*time.Second)
	defer cancel()
	result, detail := p.probe(ctx, pr)
	p.total.WithLabelValues(pr.Kind(), result).Inc()
	if result != probeSuccess {
		p.log.Debug("app probe failed", "path", r.URL.Path, "result", result, "detail", detail)
		http.Error(w, result+": "+detail, http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok: "+detail+"\n")
}

// target is host:port of the pod at port, and the source address to
// dial from: the pod's IP, as Kubernetes probes it, or the probe's
// loopback host; the IPv6 loopback when the pod's IP is IPv6 (the capture
// installs no IPv6 passthrough address), 127.0.0.1 when the IP is
// unknown. IPv4 targets are dialled from the passthrough source.
func (p *AppProber) target(host string, port int) (addr string, source *net.TCPAddr) {
	switch {
	case strings.EqualFold(host, "localhost"):
		host = "127.0.0.1"
	case host != "":
		host = strings.Trim(host, "[]")
	case p.podIP == nil:
		host = "127.0.0.1"
	case p.podIP.To4() == nil:
		host = "::1"
	default:
		host = p.podIP.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.To4() != nil {
		source = passthroughSource
	}
	return net.JoinHostPort(host, strconv.Itoa(port)), source
}

func (p *AppProber) probe(ctx context.Context, pr *appprobe.Prober) (result, detail string) {
	switch {
	case pr.HTTPGet != nil:
		return p.probeHTTP(ctx, pr.HTTPGet)
	case pr.GRPC != nil:
		return p.probeGRPC(ctx, pr.GRPC)
	default:
		return p.probeTCP(ctx, pr.TCPSocket)
	}
}

// dialFunc dials from source when it is set; where the address does not
// exist (a host whose loopback is 127.0.0.1 alone, never a pod) it dials
// from the default source instead.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

func dialer(source *net.TCPAddr) dialFunc {
	plain := &net.Dialer{}
	if source == nil {
		return plain.DialContext
	}
	from := &net.Dialer{LocalAddr: source}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := from.DialContext(ctx, network, addr)
		if errors.Is(err, syscall.EADDRNOTAVAIL) {
			return plain.DialContext(ctx, network, addr)
		}
		return c, err
	}
}

// probeHTTP is Kubernetes' HTTP probe: GET, 200-399 succeeds, redirects
// followed only on the same host (one elsewhere is the answer: a success,
// as Kubernetes counts it, but never followed off the pod), the probe's
// headers, TLS unverified for HTTPS.
func (p *AppProber) probeHTTP(ctx context.Context, h *appprobe.HTTPGet) (string, string) {
	addr, source := p.target(h.Host, h.Port)
	scheme := "http"
	if h.Scheme == appprobe.SchemeHTTPS {
		scheme = "https"
	}
	path := h.Path
	if path == "" {
		path = "/"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+addr+path, nil)
	if err != nil {
		return probeError, "the probe's request: " + err.Error()
	}
	req.Header.Set("User-Agent", "kube-probe/nave-agent")
	req.Header.Set("Accept", "*/*")
	for _, hd := range h.HTTPHeaders {
		if strings.EqualFold(hd.Name, "Host") {
			req.Host = hd.Value
			continue
		}
		req.Header.Add(hd.Name, hd.Value)
	}
	client := &http.Client{
		Transport: &http.Transport{
			DialContext:       dialer(source),
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // Kubernetes' HTTPS probes verify nothing either
			DisableKeepAlives: true,
			Proxy:             nil,
		},
		CheckRedirect: func(next *http.Request, via []*http.Request) error {
			if next.URL.Hostname() != via[0].URL.Hostname() { // Kubernetes' rule: the same host, any port
				return http.ErrUseLastResponse
			}
			if len(via) >= maxProbeRedirects {
				return fmt.Errorf("stopped after %d redirects", maxProbeRedirects)
			}
			return nil
		},
	}
	resp, err := client.Do(req)
	if err != nil {
		return probeError, errText(ctx, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxProbeBody))
	detail := fmt.Sprintf("HTTP %d from %s", resp.StatusCode, addr)
	if resp.StatusCode >= 200 && resp.StatusCode < 400 {
		return probeSuccess, detail
	}
	return probeFailure, detail
}

// probeGRPC is Kubernetes' gRPC probe: grpc.health.v1 Check of the
// service, plaintext, SERVING succeeds.
func (p *AppProber) probeGRPC(ctx context.Context, g *appprobe.GRPC) (string, string) {
	addr, source := p.target("", g.Port)
	d := dialer(source)
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d(ctx, "tcp", a) }))
	if err != nil {
		return probeError, "gRPC client: " + err.Error()
	}
	defer conn.Close()
	service := ""
	if g.Service != nil {
		service = *g.Service
	}
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return probeError, errText(ctx, err)
	}
	detail := fmt.Sprintf("gRPC health %s of service %q at %s", resp.GetStatus(), service, addr)
	if resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
		return probeSuccess, detail
	}
	return probeFailure, detail
}

// probeTCP is Kubernetes' TCP probe: the connection opens.
func (p *AppProber) probeTCP(ctx context.Context, s *appprobe.TCPSocket) (string, string) {
	addr, source := p.target(s.Host, s.Port)
	conn, err := dialer(source)(ctx, "tcp", addr)
	if err != nil {
		return probeError, errText(ctx, err)
	}
	conn.Close()
	return probeSuccess, "connected to " + addr
}

// errText says why a probe got no answer, naming a timeout as such.
func errText(ctx context.Context, err error) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return "no answer within the probe's timeoutSeconds: " + err.Error()
	}
	return err.Error()
}
