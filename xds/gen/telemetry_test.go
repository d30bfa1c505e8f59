package gen

import (
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tracev3 "github.com/envoyproxy/go-control-plane/envoy/config/trace/v3"
	"google.golang.org/protobuf/proto"
	statsv1 "istio.io/api/envoy/extensions/stats"

	"github.com/navemesh/nave/internal/envoysim"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/envoy"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/proxy"
)

// telemetryMeshConfig defines a provider of every kind nave generates.
const telemetryMeshConfig = `
accessLogEncoding: TEXT
extensionProviders:
- {name: otel, opentelemetry: {service: otel-collector.observability.svc.cluster.local, port: 4317}}
- {name: zipkin, zipkin: {service: zipkin.observability.svc.cluster.local, port: 9411}}
- {name: json-log, envoyFileAccessLog: {path: /dev/stdout, logFormat: {labels: {method: "%REQ(:METHOD)%", authority: "%REQ(:AUTHORITY)%"}}}}
- {name: otel-als, envoyOtelAls: {service: otel-collector.observability.svc.cluster.local, port: 4317}}
- {name: http-als, envoyHttpAls: {service: otel-collector.observability.svc.cluster.local, port: 4317}}
- {name: tcp-als, envoyTcpAls: {service: otel-collector.observability.svc.cluster.local, port: 4317}}
defaultProviders: {metrics: [prometheus]}
`

// telemetryObjects: the collectors, a mesh-wide Telemetry in the root
// namespace (Istio's default access log, OpenTelemetry tracing at 10%,
// a tag override), shop's (Zipkin at 50% with custom tags), and one for
// the reviews workload (JSON and OpenTelemetry logs instead; server
// request counts dropped).
const telemetryObjects = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: collectors, namespace: observability}
spec:
  hosts: [otel-collector.observability.svc.cluster.local, zipkin.observability.svc.cluster.local]
  ports: [{number: 4317, name: grpc-otlp, protocol: GRPC}, {number: 9411, name: http-zipkin, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.9.0.1}]
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: mesh-default, namespace: istio-system}
spec:
  accessLogging: [{providers: [{name: envoy}]}]
  tracing: [{providers: [{name: otel}], randomSamplingPercentage: 10}]
  metrics:
  - providers: [{name: prometheus}]
    overrides:
    - match: {metric: REQUEST_COUNT}
      tagOverrides: {request_host: {operation: REMOVE}, mesh: {value: "'m'"}}
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: shop, namespace: shop}
spec:
  tracing:
  - providers: [{name: zipkin}]
    randomSamplingPercentage: 50
    customTags:
      team: {literal: {value: bookinfo}}
      user: {header: {name: x-user, defaultValue: anonymous}}
      pod: {environment: {name: POD_NAME}}
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: reviews, namespace: shop}
spec:
  selector: {matchLabels: {app: reviews}}
  accessLogging:
  - providers: [{name: json-log}, {name: otel-als}, {name: http-als}, {name: tcp-als}]
  - providers: [{name: otel-als}]
    match: {mode: SERVER}
    disabled: true
  metrics:
  - overrides: [{match: {metric: REQUEST_COUNT, mode: SERVER}, disabled: true}]
`

// TestGoldenTelemetry compares a sidecar of Istio's build under
// Telemetry objects of every level with testdata/golden/telemetry-*.json,
// every typed config validated.
func TestGoldenTelemetry(t *testing.T) {
	snap := meshSnapshot(t, telemetryMeshConfig, telemetryObjects)
	key := reviewsKey
	key.IstioBuild = true
	out := Envoy(snap, key)
	gentest.ValidateDeep(t, out)
	checkGolden(t, "telemetry-sidecar-shop-reviews.json", goldenJSON(t, out))
}

// TestTelemetryRequestPath walks requests through the generated config:
// which access logs record them (and the line Istio's default format
// writes), how they are traced, and Istio's stats filters.
func TestTelemetryRequestPath(t *testing.T) {
	snap := meshSnapshot(t, telemetryMeshConfig, telemetryObjects)
	reviews := reviewsKey
	reviews.IstioBuild = true
	frontend := frontendKey // upstream Envoy; web has only the mesh-wide Telemetry
	outbound := envoysim.Request{IP: "10.96.0.11", Port: 9080, Authority: "ratings.shop.svc.cluster.local:9080", Method: "GET", Path: "/ratings/1",
		SourceIP: "10.1.0.1", Headers: map[string]string{"user-agent": "curl/8", "x-request-id": "r-1"}}
	inbound := envoysim.Request{Inbound: true, IP: "10.1.0.1", Port: 9080, Authority: "reviews", Method: "GET", Path: "/reviews/1",
		SourceIP: "10.2.0.1", PeerCert: "spiffe://cluster.local/ns/web/sa/frontend", ALPN: []string{"istio"}}

	t.Run("frontend: the mesh-wide access log in Istio's format, OpenTelemetry at 10%", func(t *testing.T) {
		out := Envoy(snap, frontend)
		gentest.ValidateDeep(t, out)
		r := envoysim.New(out.Resources).Do(envoysim.Request{IP: "10.96.0.10", Port: 9080, Authority: "reviews.shop.svc.cluster.local:9080",
			Method: "GET", Path: "/reviews/1", SourceIP: "10.2.0.1", Headers: map[string]string{"user-agent": "curl/8", "x-request-id": "r-1"}})
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		tel := r.Telemetry
		if len(tel.AccessLogs) != 1 || tel.AccessLogs[0].GetName() != envoy.FileAccessLog {
			t.Fatalf("access logs = %v, want the envoy file log", tel.AccessLogs)
		}
		line, err := envoysim.LogLine(tel.AccessLogs[0], envoysim.Request{Method: "GET", Path: "/reviews/1", Authority: "reviews.shop.svc.cluster.local:9080",
			SourceIP: "10.2.0.1", IP: "10.96.0.10", Port: 9080, Headers: map[string]string{"user-agent": "curl/8", "x-request-id": "r-1"}}, r)
		if err != nil {
			t.Fatal(err)
		}
		want := `[-] "GET /reviews/1 HTTP/1.1" - - - - "-" - - - - "-" "curl/8" "r-1" "reviews.shop.svc.cluster.local:9080" "-" ` +
			r.Clusters[0].Name + " - 10.96.0.10:9080 10.2.0.1 - " + r.Route.GetName() + "\n"
		if line != want {
			t.Errorf("access log line\n got %q\nwant %q", line, want)
		}
		// web's Sidecar does not import the collectors' namespace: the
		// tracer would name a cluster the proxy lacks (a NACK), so it is
		// left out and reported.
		if tel.Tracing != nil {
			t.Errorf("tracing = %v, want none (the collector is not visible)", tel.Tracing)
		}
		reported := false
		for _, p := range out.Problems {
			reported = reported || strings.Contains(p.Reason, `provider "otel": service otel-collector.observability.svc.cluster.local is not a mesh service visible`)
		}
		if !reported {
			t.Errorf("problems %v do not report the invisible collector", out.Problems)
		}
		for _, f := range tel.HTTPFilters {
			if strings.HasPrefix(f, "istio.") {
				t.Errorf("upstream Envoy got Istio's filter %s", f)
			}
		}
		// A mesh-wide sampling where the collector is visible: 10%.
		tr := envoysim.New(Envoy(snap, ingressKey(t)).Resources).Do(envoysim.Request{ListenerPort: 80, IP: "10.3.0.1", Port: 80,
			Authority: "shop.example.com", Method: "GET", Path: "/"})
		if got := tr.Telemetry.Tracing.GetRandomSampling().GetValue(); got != 10 || tr.Telemetry.Tracing.GetProvider().GetName() != envoy.OtelTracer {
			t.Errorf("gateway tracing = %v, want OpenTelemetry at 10%%", tr.Telemetry.Tracing)
		}
		if !tr.Telemetry.Tracing.GetSpawnUpstreamSpan().GetValue() {
			t.Error("a gateway's tracing spawns no upstream span (Istio's gateways do)")
		}
	})

	t.Run("reviews outbound: shop's Zipkin at 50% with custom tags, the workload's logs, Istio's filters", func(t *testing.T) {
		r := envoysim.New(Envoy(snap, reviews).Resources).Do(outbound)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		tel := r.Telemetry
		var names []string
		for _, al := range tel.AccessLogs {
			names = append(names, al.GetName())
		}
		if got, want := strings.Join(names, ","), envoy.HTTPGrpcAccessLog+","+envoy.FileAccessLog+","+envoy.OtelAccessLog; got != want {
			t.Errorf("access logs = %s, want %s (http-als, json-log, otel-als by provider name; no TCP ALS on HTTP)", got, want)
		}
		line, err := envoysim.LogLine(tel.AccessLogs[1], outbound, r)
		if err != nil {
			t.Fatal(err)
		}
		if want := `{"authority":"ratings.shop.svc.cluster.local:9080","method":"GET"}` + "\n"; line != want {
			t.Errorf("JSON access log line %q, want %q", line, want)
		}
		if got := tel.Tracing.GetRandomSampling().GetValue(); got != 50 {
			t.Errorf("random sampling = %v, want 50 (shop overrides the root namespace)", got)
		}
		zc := new(tracev3.ZipkinConfig)
		if err := tel.Tracing.GetProvider().GetTypedConfig().UnmarshalTo(zc); err != nil {
			t.Fatalf("tracer is not Zipkin: %v", err)
		}
		if c := zc.GetCollectorService().GetHttpUri().GetCluster(); c != "outbound|9411||zipkin.observability.svc.cluster.local" {
			t.Errorf("zipkin collector cluster = %s", c)
		}
		var tags []string
		for _, ct := range tel.Tracing.GetCustomTags() {
			tags = append(tags, ct.GetTag())
		}
		if got := strings.Join(tags, ","); got != "pod,team,user" {
			t.Errorf("custom tags = %s", got)
		}
		if got, want := strings.Join(tel.HTTPFilters, ","), envoy.IstioMetadataExchangeFilter+",envoy.filters.http.fault,envoy.filters.http.cors,"+envoy.IstioStatsFilter+",envoy.filters.http.router"; got != want {
			t.Errorf("http filters = %s, want %s", got, want)
		}
	})

	t.Run("reviews inbound: the OpenTelemetry log disabled for the server side, request counts dropped", func(t *testing.T) {
		out := Envoy(snap, reviews)
		r := envoysim.New(out.Resources).Do(inbound)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		var names []string
		for _, al := range r.Telemetry.AccessLogs {
			names = append(names, al.GetName())
		}
		if got, want := strings.Join(names, ","), envoy.HTTPGrpcAccessLog+","+envoy.FileAccessLog; got != want {
			t.Errorf("access logs = %s, want %s", got, want)
		}
		stats := statsFilterConfig(t, r)
		want := &statsv1.PluginConfig{DisableHostHeaderFallback: true, Metrics: []*statsv1.MetricConfig{
			{Name: "requests_total", Drop: true, Dimensions: map[string]string{"mesh": "'m'"}, TagsToRemove: []string{"request_host"}}}}
		if !proto.Equal(stats, want) {
			t.Errorf("stats filter config = %v, want %v", stats, want)
		}
	})

	t.Run("reviews TCP: the TCP ALS and the network stats filter", func(t *testing.T) {
		r := envoysim.New(Envoy(snap, reviews).Resources).Do(envoysim.Request{IP: "10.96.0.11", Port: 5432, SourceIP: "10.1.0.1"})
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		var names []string
		for _, al := range r.Telemetry.AccessLogs {
			names = append(names, al.GetName())
		}
		if got, want := strings.Join(names, ","), envoy.FileAccessLog+","+envoy.OtelAccessLog+","+envoy.TCPGrpcAccessLog; got != want {
			t.Errorf("access logs = %s, want %s", got, want)
		}
		if got := r.Telemetry.NetworkFilters; len(got) < 2 || got[len(got)-2] != envoy.IstioStatsFilter {
			t.Errorf("network filters = %v, want istio.stats before tcp_proxy", got)
		}
	})
}

// statsFilterConfig is the istio.stats configuration of the HTTP
// connection manager that handled r.
func statsFilterConfig(t *testing.T, r envoysim.Result) *statsv1.PluginConfig {
	t.Helper()
	a := r.Telemetry.HTTPFilterConfigs[envoy.IstioStatsFilter]
	if a == nil {
		t.Fatalf("no %s filter among %v", envoy.IstioStatsFilter, r.Telemetry.HTTPFilters)
	}
	cfg := new(statsv1.PluginConfig)
	if err := a.UnmarshalTo(cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func ingressKey(t *testing.T) proxy.Key {
	t.Helper()
	for _, p := range goldenProxies {
		if p.key.Type == proxy.Router {
			return p.key
		}
	}
	t.Fatal("no gateway among the golden proxies")
	return proxy.Key{}
}

// TestMeshConfigAccessLogFile: without Telemetry access logging (a
// Telemetry of metrics only does not count), MeshConfig accessLogFile
// logs every request in Istio's JSON fields with accessLogEncoding JSON,
// and a listener log records connections no chain takes, unless
// disableEnvoyListenerLog.
func TestMeshConfigAccessLogFile(t *testing.T) {
	const metricsOnly = `apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: mesh-default, namespace: istio-system}
spec:
  metrics: [{providers: [{name: prometheus}]}]
`
	req := envoysim.Request{IP: "10.96.0.10", Port: 9080, Authority: "reviews.shop.svc.cluster.local:9080", Method: "GET", Path: "/reviews/1", SourceIP: "10.2.0.1"}
	for _, tc := range []struct {
		cfg          string
		listenerLogs int
	}{
		{"accessLogFile: /dev/stdout\naccessLogEncoding: JSON", 1},
		{"accessLogFile: /dev/stdout\naccessLogEncoding: JSON\ndisableEnvoyListenerLog: true", 0},
	} {
		out := Envoy(meshSnapshot(t, tc.cfg, metricsOnly), frontendKey)
		gentest.ValidateDeep(t, out)
		r := envoysim.New(out.Resources).Do(req)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if len(r.Telemetry.AccessLogs) != 1 {
			t.Fatalf("%q: access logs %v, want the accessLogFile's", tc.cfg, r.Telemetry.AccessLogs)
		}
		line, err := envoysim.LogLine(r.Telemetry.AccessLogs[0], req, r)
		if err != nil {
			t.Fatal(err)
		}
		for _, field := range []string{`"method":"GET"`, `"path":"/reviews/1"`, `"authority":"reviews.shop.svc.cluster.local:9080"`, `"upstream_cluster":"` + r.Clusters[0].Name + `"`, `"response_code":"-"`} {
			if !strings.Contains(line, field) {
				t.Errorf("%q: JSON line %s lacks %s", tc.cfg, line, field)
			}
		}
		for _, res := range out.Resources[typeurl.Listener] {
			if l := res.Message.(*listenerv3.Listener); len(l.GetAccessLog()) != tc.listenerLogs {
				t.Errorf("%q: listener %s has %d listener logs, want %d", tc.cfg, l.GetName(), len(l.GetAccessLog()), tc.listenerLogs)
			}
		}
	}
}
