package node

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/navemesh/nave/internal/kubenode"
)

// secureBackend is the demo backend as a proxyless gRPC server of the mesh (--xds: grpc-go's
// xDS server, its listener from the hub), injected with grpc-agent. Its readiness probe is
// TCP: the agent's gRPC health check is plain text, which STRICT refuses.
const secureBackend = `apiVersion: v1
kind: Service
metadata: {name: secure, namespace: demo}
spec:
  selector: {app: secure}
  ports:
  - {name: grpc, port: 7070, targetPort: 7070}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: secure, namespace: demo}
spec:
  replicas: 1
  selector:
    matchLabels: {app: secure}
  template:
    metadata:
      labels: {app: secure}
      annotations: {inject.istio.io/templates: grpc-agent}
    spec:
      containers:
      - name: echo
        image: nave-demo-backend:dev
        imagePullPolicy: Never
        args: [--listen, "0.0.0.0:7070", --name, secure, --xds]
        ports:
        - {name: grpc, containerPort: 7070}
        readinessProbe:
          tcpSocket: {port: 7070}
          periodSeconds: 1
`

// secureMTLS is the mesh's mTLS for the secure backend: STRICT at the server (the hub's
// listener for it requires a client certificate of the mesh), ISTIO_MUTUAL at its clients.
const secureMTLS = `apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: secure, namespace: demo}
spec:
  selector:
    matchLabels: {app: secure}
  mtls: {mode: STRICT}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: secure, namespace: demo}
spec:
  host: secure.demo.svc.cluster.local
  trafficPolicy:
    tls: {mode: ISTIO_MUTUAL}
`

const secureClient = `apiVersion: v1
kind: Pod
metadata:
  name: secure-client
  namespace: demo
  labels: {app: secure-client}
  annotations: {inject.istio.io/templates: grpc-agent}
spec:
  containers:
  - name: client
    image: nave-demo-client:dev
    imagePullPolicy: Never
    args: [--target, "xds:///secure.demo.svc.cluster.local:7070", --json, --interval, 100ms]
`

// plainHealth makes one gRPC health check of addr in plain text over a new connection.
func plainHealth(ctx context.Context, addr string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health %s", resp.GetStatus())
	}
	return nil
}

// testAppMTLS: app-to-app mutual TLS between two injected proxyless gRPC workloads, proven
// by what would fail without it. The secure backend, grpc-go's xDS server in a grpc-agent
// pod, first answers a plain-text call from the host (its listener from the hub, no
// PeerAuthentication yet: plain text). A STRICT PeerAuthentication for it (and ISTIO_MUTUAL
// for its clients, a DestinationRule) applied with kubectl, the same plain-text call is
// refused; then an injected demo client, whose xDS credentials take the workload
// certificate the agent wrote, has its calls answered by it; and the plain-text call is
// still refused after them.
func testAppMTLS(t *testing.T, n *kubenode.Node, _ *install) {
	ctx := stepContext(t)
	apply(ctx, t, n, secureBackend)
	pods := deploymentReady(ctx, t, n, "demo", "secure")
	checkInjected(t, &pods[0], "grpc-agent")
	addr := net.JoinHostPort(pods[0].Status.PodIP, "7070")
	var last error
	until(ctx, t, n, "a plain-text call to the secure backend answered (its listener from the hub, no PeerAuthentication yet)", func() (bool, string, error) {
		last = plainHealth(ctx, addr)
		return last == nil, fmt.Sprint(last), nil
	})

	apply(ctx, t, n, secureMTLS)
	until(ctx, t, n, "a plain-text call to the secure backend refused (STRICT)", func() (bool, string, error) {
		last = plainHealth(ctx, addr)
		return last != nil, "still answered", nil
	})
	t.Logf("STRICT: a plain-text call is refused: %v", last)

	apply(ctx, t, n, secureClient)
	created := waitPodReady(ctx, t, n, "demo", "secure-client")
	checkInjected(t, created, "grpc-agent")
	var answered, failed int
	var first time.Time
	until(ctx, t, n, "ten calls of the injected client answered by the secure backend", func() (bool, string, error) {
		calls, err := podCalls(n, "demo", "secure-client")
		if err != nil {
			return false, err.Error(), nil
		}
		answered, failed = 0, 0
		lastCall := "no calls yet"
		for _, c := range calls {
			if c.Code == "OK" && c.Backend == "secure" {
				if answered == 0 {
					first, _ = time.Parse(time.RFC3339Nano, c.Time)
				}
				answered++
			} else if c.Code != "OK" {
				failed++
			}
			lastCall = fmt.Sprintf("%+v", c)
		}
		return answered >= 10, lastCall, nil
	})
	t.Logf("the injected client's calls over mTLS: %d answered by the secure backend (%d failed), the first %v after the pod's creation",
		answered, failed, first.Sub(created.CreationTimestamp.Time).Round(time.Millisecond))
	if err := plainHealth(ctx, addr); err == nil {
		t.Errorf("a plain-text call to the secure backend at %s was answered after STRICT", addr)
	}
	if log, _ := n.ContainerLog("demo", pods[0].Name, "echo"); !strings.Contains(log, "mode=SERVING") {
		t.Errorf("the secure backend's log shows no xDS serving mode:\n%s", lastLines(log, 5))
	}
}

// podCalls reads the calls of the demo client in pod ns/name from its log on the node.
func podCalls(n *kubenode.Node, ns, name string) ([]call, error) {
	out, err := n.ContainerLog(ns, name, "client")
	if err != nil {
		return nil, err
	}
	return parseCalls(out), nil
}
