package proxyless_test

import (
	"context"
	"net"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/stats/opentelemetry"
	"google.golang.org/grpc/stats/opentelemetry/csm"

	"github.com/navemesh/nave/shared/xdsbootstrap"
	"github.com/navemesh/nave/xds/gen"
	"github.com/navemesh/nave/xds/gen/gentest"
)

// TestGRPCCSMObservabilityLabels: a real grpc-go client with its CSM
// observability plugin, reading the generated xDS, labels its metrics
// with the mesh's service (csm.service_name, csm.service_namespace_name:
// the clusters' com.google.csm.telemetry_labels), the mesh
// (csm.mesh_id) and the peer's canonical service exchanged with the
// server (csm.remote_workload_canonical_service), from the environment
// nave-agent gives proxyless workloads (xdsbootstrap.CSMEnv).
func TestGRPCCSMObservabilityLabels(t *testing.T) {
	const host = "echo.demo.svc.cluster.local"
	for name, value := range xdsbootstrap.CSMEnv("m", "echo-v1", "echo") {
		t.Setenv(name, value)
	}
	reader := metric.NewManualReader()
	provider := metric.NewMeterProvider(metric.WithReader(reader))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	disable := csm.EnableObservability(ctx, opentelemetry.Options{MetricsOptions: opentelemetry.MetricsOptions{
		MeterProvider:  provider,
		Metrics:        opentelemetry.DefaultMetrics(),
		OptionalLabels: []string{"csm.service_name", "csm.service_namespace_name"},
	}})
	t.Cleanup(disable)

	// The server, created after EnableObservability, exchanges its labels.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	h, p, _ := net.SplitHostPort(lis.Addr().String())

	out := gen.GRPC(gentest.Snapshot(t, map[string]string{"c1": `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: demo}
spec:
  hosts: [` + host + `]
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  endpoints: [{address: ` + h + `, ports: {grpc: ` + p + `}}]
`}))
	client := healthpb.NewHealthClient(grpcClient(t, out, "xds:///"+host+":7070"))
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatal(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"csm.service_name":                      "echo",
		"csm.service_namespace_name":            "demo",
		"csm.mesh_id":                           "m",
		"csm.workload_canonical_service":        "echo",
		"csm.remote_workload_canonical_service": "echo",
	}
	var attrs attribute.Set
	found := false
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "grpc.client.attempt.duration" {
				continue
			}
			if hist, ok := m.Data.(metricdata.Histogram[float64]); ok && len(hist.DataPoints) > 0 {
				attrs, found = hist.DataPoints[len(hist.DataPoints)-1].Attributes, true
			}
		}
	}
	if !found {
		t.Fatalf("no grpc.client.attempt.duration recorded: %+v", rm.ScopeMetrics)
	}
	for k, v := range want {
		if got, ok := attrs.Value(attribute.Key(k)); !ok || got.AsString() != v {
			t.Errorf("label %s = %q, want %q (labels %v)", k, got.AsString(), v, attrs.ToSlice())
		}
	}
}
