package ads_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/navemesh/nave/internal/xdstest"
	"github.com/navemesh/nave/shared/xdsbootstrap"
	"github.com/navemesh/nave/xds/gen/proxyless"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
)

// TestProxylessServerEnforcesAuthorization: a real grpc-go xDS server
// (xds.NewGRPCServer) fetches its server listener from the hub's ADS, by
// the name of the address it listens on, and enforces the workload's
// AuthorizationPolicies.
func TestProxylessServerEnforcesAuthorization(t *testing.T) {
	lis, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	f := newFixture(t, nil)
	f.set(t, "m", mesh.ClusterInput{Name: "c1", Synced: true, Connected: true, Objects: pushctxtest.Decode(t, fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: health, namespace: demo}
spec:
  hosts: [health.demo.svc.cluster.local]
  location: MESH_INTERNAL
  ports: [{number: 7070, name: grpc, protocol: GRPC, targetPort: %d}]
  resolution: STATIC
  endpoints: [{address: 127.0.0.1, labels: {app: health}}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: check-only, namespace: demo}
spec:
  selector: {matchLabels: {app: health}}
  rules: [{from: [{source: {ipBlocks: [127.0.0.0/8]}}], to: [{operation: {paths: [/grpc.health.v1.Health/Check]}}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: blocked, namespace: demo}
spec:
  action: DENY
  rules: [{when: [{key: "request.headers[x-block]", values: ["yes"]}]}]
`, port))})

	bootstrap, err := xdsbootstrap.New(f.addr, "health-server", map[string]any{
		"GENERATOR": "grpc", "NAMESPACE": "demo", "LABELS": map[string]any{"app": "health"}, "INSTANCE_IPS": "127.0.0.1"}, nil).
		WithServerListenerTemplate(proxyless.ServerListenerPrefix + "%s").JSON()
	if err != nil {
		t.Fatal(err)
	}
	xdstest.ServeHealth(t, lis, bootstrap, waitFor)

	client := healthpb.NewHealthClient(dial(t, "127.0.0.1:"+strconv.Itoa(port)))
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("Check: %v, want allowed", err)
	}
	if _, err := client.Check(metadata.AppendToOutgoingContext(ctx, "x-block", "yes"), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Check with x-block: %v, want PermissionDenied", err)
	}
	stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("Watch: %v, want PermissionDenied (only Check is allowed)", err)
	}
}
