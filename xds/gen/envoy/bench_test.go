package envoy

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/gen/build"
	"github.com/navemesh/nave/xds/gen/scope"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

// The workload shapes Istio benchmarks its own generators on
// (pilot/pkg/xds/bench_test.go), rebuilt here so the numbers compare:
//
//   - http: n ServiceEntries, each with a VIP, one HTTP port and one
//     endpoint, and a service at the proxy's own IP (1.1.1.1);
//   - virtualservice: the same without VIPs, plus one VirtualService per
//     service (two match clauses, a rewrite, one destination);
//   - http-telemetry: http with Istio's telemetry-api shape on top: a
//     mesh-wide Telemetry with prometheus metrics and Istio's default file
//     access log, on a proxy of Istio's build (so the stats and metadata
//     exchange filters are generated too);
//   - gateways: n Gateways (one HTTP server and one ISTIO_MUTUAL HTTPS
//     server, three hosts each) with one VirtualService each, on one router
//     proxy whose service serves 80 and 443 (Istio's
//     testdata/benchmarks/gateways.yaml; until 2020 it had six more SIMPLE
//     servers on 443 with the same hosts, which both generators refuse as
//     duplicate server names).
type envoyShape struct {
	name  string
	key   proxy.Key
	write func(b *strings.Builder, i int)
	// instancePorts are the ports of the proxy's own service (default:
	// HTTP 80).
	instancePorts string
}

var (
	benchSidecarKey   = proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "default", Labels: "istio.io/benchmark=true", IPs: "1.1.1.1"}
	benchTelemetryKey = proxy.Key{Type: proxy.Sidecar, Mesh: "m", Namespace: "default", Labels: "istio.io/benchmark=true", IPs: "1.1.1.1", IstioBuild: true}
)

var envoyShapes = []envoyShape{
	{name: "http", key: benchSidecarKey, write: writeHTTPService},
	{name: "http-telemetry", key: benchTelemetryKey, write: func(b *strings.Builder, i int) {
		if i == 0 {
			b.WriteString(`---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: telemetry, namespace: istio-system}
spec:
  metrics: [{providers: [{name: prometheus}]}]
  accessLogging: [{providers: [{name: envoy}]}]
`)
		}
		writeHTTPService(b, i)
	}},
	{name: "virtualservice", key: benchSidecarKey, write: func(b *strings.Builder, i int) {
		fmt.Fprintf(b, `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: service-%[1]d, namespace: default}
spec:
  hosts: [random-%[1]d.host.example]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 1.2.3.4}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: vs-%[1]d, namespace: default}
spec:
  hosts: [random-%[1]d.host.example]
  http:
  - name: match-route
    match: [{uri: {prefix: /foo}}, {uri: {regex: /bar}}]
    rewrite: {uri: /new-url}
    route: [{destination: {host: random-%[1]d.host.example}}]
`, i)
	}},
	{name: "gateways", key: proxy.Key{Type: proxy.Router, Mesh: "m", Namespace: "gateway", Labels: "istio.io/benchmark=true", IPs: "1.1.1.1", SDSCluster: "sds-grpc"},
		write: func(b *strings.Builder, i int) {
			hosts := fmt.Sprintf("[random-a-%[1]d.host.example, random-b-%[1]d.host.example, random-c-%[1]d.host.example]", i)
			fmt.Fprintf(b, `---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: vs-%[1]d, namespace: gateway}
spec:
  hosts: %[2]s
  gateways: [gateway/gateway-%[1]d]
  http:
  - match: [{uri: {prefix: /route-%[1]d}}]
    route: [{destination: {host: random-%[1]d.host.example}}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gateway-%[1]d, namespace: gateway}
spec:
  selector: {istio.io/benchmark: "true"}
  servers:
  - {port: {number: 80, name: http, protocol: HTTP}, hosts: %[2]s}
  - {port: {number: 443, name: https, protocol: HTTPS}, hosts: %[2]s, tls: {mode: ISTIO_MUTUAL}}
`, i, hosts)
			fmt.Fprintf(b, `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: service-%[1]d, namespace: gateway}
spec:
  hosts: [random-%[1]d.host.example]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 1.2.3.4}]
`, i)
		},
		instancePorts: "[{number: 80, name: http, protocol: HTTP}, {number: 443, name: https, protocol: HTTPS}]",
	},
}

// writeHTTPService writes the http shape's service i.
func writeHTTPService(b *strings.Builder, i int) {
	fmt.Fprintf(b, `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: service-%[1]d, namespace: default}
spec:
  addresses: [240.240.%[2]d.%[3]d]
  hosts: [random-%[1]d.host.example]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  location: MESH_INTERNAL
  endpoints: [{address: 240.241.%[2]d.%[3]d}]
`, i, i/255, i%255)
}

// shapeInput renders a shape at n services into one cluster's objects.
func shapeInput(tb testing.TB, sh envoyShape, n int) []mesh.ClusterInput {
	tb.Helper()
	ports := sh.instancePorts
	if ports == "" {
		ports = "[{number: 80, name: http, protocol: HTTP}]"
	}
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: proxy-service-instance, namespace: default}
spec:
  hosts: [example.com]
  ports: %s
  resolution: STATIC
  endpoints: [{address: 1.1.1.1, labels: {istio.io/benchmark: "true"}}]
`, ports)
	for i := range n {
		sh.write(&b, i)
	}
	objs, errs := meshconfig.DecodeYAML([]byte(b.String()), sh.name+".yaml")
	if len(errs) > 0 {
		tb.Fatal(errs[0])
	}
	return []mesh.ClusterInput{{Name: "c1", Synced: true, Connected: true, Objects: objs}}
}

var envoyBenchSizes = []int{100, 1000, 5000}

// envoyTypes are the per-type generators, as the ADS server calls them.
var envoyTypes = []struct {
	name string
	gen  func(*scope.View) []build.Resource
	url  string
}{
	{"CDS", Clusters, typeurl.Cluster},
	{"EDS", Endpoints, typeurl.Endpoint},
	{"LDS", Listeners, typeurl.Listener},
	{"RDS", Routes, typeurl.Route},
}

// generateMarshalled scopes the snapshot to the key, generates one type and
// marshals each resource into an Any, as a push does (without caching).
func generateMarshalled(snap *mesh.Snapshot, key proxy.Key, gen func(*scope.View) []build.Resource) (bytes, resources int, err error) {
	return marshalAll(gen(scope.New(snap, key)))
}

// marshalAll marshals each resource into an Any (from Resource.Wire when
// its generator encoded it), returning their size and number.
func marshalAll(rs []build.Resource) (bytes, resources int, err error) {
	for _, r := range rs {
		a := &anypb.Any{TypeUrl: "type.googleapis.com/" + string(r.Message.ProtoReflect().Descriptor().FullName()), Value: r.Wire}
		if r.Wire == nil { // not encoded by its generator
			if a, err = anypb.New(r.Message); err != nil {
				return 0, 0, err
			}
		}
		bytes += proto.Size(a)
		resources++
	}
	return bytes, resources, nil
}

// BenchmarkEnvoyPushContext measures merging a shape into a snapshot:
// "cold" from nothing, "rebuild" with the hub's Builder after an earlier
// build of the same objects (the push context rebuilt after a change
// elsewhere in the mesh).
func BenchmarkEnvoyPushContext(b *testing.B) {
	for _, sh := range envoyShapes {
		for _, n := range envoyBenchSizes {
			in := shapeInput(b, sh, n)
			b.Run(fmt.Sprintf("%s/services=%d/cold", sh.name, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					mesh.Build("m", in)
				}
			})
			b.Run(fmt.Sprintf("%s/services=%d/rebuild", sh.name, n), func(b *testing.B) {
				var builder mesh.Builder
				builder.Build("m", in)
				b.ReportAllocs()
				for b.Loop() {
					builder.Build("m", in)
				}
			})
		}
	}
}

// BenchmarkEnvoyGenerate measures per-type generation and marshalling for
// one proxy of each shape, with no caching.
func BenchmarkEnvoyGenerate(b *testing.B) {
	for _, sh := range envoyShapes {
		for _, n := range envoyBenchSizes {
			snap := mesh.Build("m", shapeInput(b, sh, n))
			for _, ty := range envoyTypes {
				b.Run(fmt.Sprintf("%s/services=%d/%s", sh.name, n, ty.name), func(b *testing.B) {
					b.ReportAllocs()
					var bytes, resources int
					start := cpuTime()
					for b.Loop() {
						var err error
						if bytes, resources, err = generateMarshalled(snap, sh.key, ty.gen); err != nil {
							b.Fatal(err)
						}
					}
					// CPU time (garbage collection included): on a shared
					// machine the wall time is mostly waiting.
					b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
					b.ReportMetric(float64(bytes)/1024, "kb/msg")
					b.ReportMetric(float64(resources), "resources/msg")
				})
			}
		}
	}
}

// cpuTime is the process's CPU time so far (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEnvoyView measures scoping a snapshot to one proxy (the View
// every per-type generation above starts from; the hub builds it once per
// proxy key and push context for all four types).
func BenchmarkEnvoyView(b *testing.B) {
	for _, sh := range envoyShapes {
		for _, n := range envoyBenchSizes {
			snap := mesh.Build("m", shapeInput(b, sh, n))
			b.Run(fmt.Sprintf("%s/services=%d", sh.name, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					v := scope.New(snap, sh.key)
					v.InboundPorts()
				}
			})
		}
	}
}

// benchEnvoyFilter is five patches of the kinds Istio users write most
// (a Lua filter before the router, an inbound local rate limit, an HCM
// setting, a header on a route configuration, a timeout on every
// outbound cluster), in the root namespace: the same YAML is the
// "http.extra.yaml" Istio's own benchmark reads for the comparison
// (docs/extensions.md).
const benchEnvoyFilter = `---
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: bench, namespace: istio-system}
spec:
  configPatches:
  - applyTo: HTTP_FILTER
    match: {context: SIDECAR_OUTBOUND, listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager, subFilter: {name: envoy.filters.http.router}}}}}
    patch: {operation: INSERT_BEFORE, value: {name: envoy.filters.http.lua, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua, default_source_code: {inline_string: "function envoy_on_request(h) end"}}}}
  - applyTo: HTTP_FILTER
    match: {context: SIDECAR_INBOUND, listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager, subFilter: {name: envoy.filters.http.router}}}}}
    patch: {operation: INSERT_BEFORE, value: {name: envoy.filters.http.local_ratelimit, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit, stat_prefix: http_local_rate_limiter}}}
  - applyTo: NETWORK_FILTER
    match: {context: SIDECAR_OUTBOUND, listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager}}}}
    patch: {operation: MERGE, value: {typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager, stream_idle_timeout: 30s}}}
  - applyTo: ROUTE_CONFIGURATION
    match: {context: SIDECAR_OUTBOUND, routeConfiguration: {portNumber: 80}}
    patch: {operation: MERGE, value: {request_headers_to_add: [{header: {key: x-bench, value: "1"}}]}}
  - applyTo: CLUSTER
    match: {context: SIDECAR_OUTBOUND}
    patch: {operation: MERGE, value: {connect_timeout: 3s}}
`

// patchedInput is the http shape at n services, with benchEnvoyFilter
// when patched.
func patchedInput(tb testing.TB, n int, patched bool) []mesh.ClusterInput {
	tb.Helper()
	in := shapeInput(tb, envoyShapes[0], n)
	if patched {
		objs, errs := meshconfig.DecodeYAML([]byte(benchEnvoyFilter), "envoyfilter.yaml")
		if len(errs) > 0 {
			tb.Fatal(errs[0])
		}
		in[0].Objects = append(in[0].Objects, objs...)
	}
	return in
}

// generateTypeMarshalled is generateMarshalled through Generate, the
// path that applies EnvoyFilters.
func generateTypeMarshalled(snap *mesh.Snapshot, key proxy.Key, typeURL string) (bytes, resources int, err error) {
	out := Generate(scope.New(snap, key), typeURL)
	if len(out.Problems) > 0 {
		return 0, 0, fmt.Errorf("problems: %v", out.Problems)
	}
	return marshalAll(out.Resources[typeURL])
}

// BenchmarkEnvoyGeneratePatched measures per-type generation of the http
// shape's sidecar at 100 services through Generate, without EnvoyFilters
// and with benchEnvoyFilter's five patches: what patching costs a proxy.
func BenchmarkEnvoyGeneratePatched(b *testing.B) {
	const n = 100
	for _, patched := range []bool{false, true} {
		snap := mesh.Build("m", patchedInput(b, n, patched))
		for _, ty := range envoyTypes {
			if ty.url == typeurl.Endpoint {
				continue // EnvoyFilters patch no endpoints
			}
			name := fmt.Sprintf("http/services=%d/patches=%d/%s", n, map[bool]int{false: 0, true: 5}[patched], ty.name)
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				var bytes, resources int
				for b.Loop() {
					var err error
					if bytes, resources, err = generateTypeMarshalled(snap, benchSidecarKey, ty.url); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(bytes)/1024, "kb/msg")
				b.ReportMetric(float64(resources), "resources/msg")
			})
		}
	}
}

// TestEnvoyBenchmarksRunOnce is the benchmarks' test twin: every shape at a
// small size, every type, once, and the output validates.
func TestEnvoyBenchmarksRunOnce(t *testing.T) {
	// BenchmarkEnvoyGeneratePatched: every patch applies, and validates.
	patched := mesh.Build("m", patchedInput(t, 5, true))
	for _, ty := range envoyTypes {
		if _, _, err := generateTypeMarshalled(patched, benchSidecarKey, ty.url); err != nil {
			t.Fatalf("patched %s: %v", ty.name, err)
		}
	}
	plain, got := generate(mesh.Build("m", patchedInput(t, 5, false)), benchSidecarKey), generate(patched, benchSidecarKey)
	for _, typeURL := range []string{typeurl.Cluster, typeurl.Listener, typeurl.Route} {
		for i, r := range got.Resources[typeURL] {
			if proto.Equal(r.Message, plain.Resources[typeURL][i].Message) && r.Name != build.BlackHoleCluster &&
				r.Name != build.InboundPassthroughCluster && r.Name != build.PassthroughCluster && r.Name != "virtualOutbound" && !strings.HasPrefix(r.Name, "inbound|") {
				t.Errorf("patched: %s %s unchanged", typeURL, r.Name)
			}
			if err := r.Message.(interface{ ValidateAll() error }).ValidateAll(); err != nil {
				t.Errorf("patched: %s %s: %v", typeURL, r.Name, err)
			}
		}
	}
	for _, sh := range envoyShapes {
		snap := mesh.Build("m", shapeInput(t, sh, 5))
		for _, ty := range envoyTypes {
			if _, _, err := generateMarshalled(snap, sh.key, ty.gen); err != nil {
				t.Fatalf("%s %s: %v", sh.name, ty.name, err)
			}
		}
		out := generate(snap, sh.key)
		for typeURL, rs := range out.Resources {
			for _, r := range rs {
				if v, ok := r.Message.(interface{ ValidateAll() error }); ok {
					if err := v.ValidateAll(); err != nil {
						t.Errorf("%s: %s %s does not validate: %v", sh.name, typeURL, r.Name, err)
					}
				}
			}
		}
	}
}
