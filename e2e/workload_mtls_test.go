package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/navemesh/nave/hub/servingcert"
)

// startMTLSServer runs a grpc-go xDS server on lis, as a VM would with
// the bootstrap navectl bootstrap writes: it gets its listener from the hub
// over mTLS with the certificate in dir, and answers health checks with
// the caller's SPIFFE ID in the x-nave-backend header.
func startMTLSServer(t *testing.T, h *hub, lis net.Listener, dir string) {
	t.Helper()
	bootstrap := mustNavectl(t, "bootstrap", "--kind", "grpc", "--name", "echo-server", "--namespace", "demo", "--service-account", "server",
		"--ip", "127.0.0.1", "--labels", "app=echo", "--hub", addr(h.xds), "--hub-ca", servingcert.RootPath(h.state), "--cert-dir", dir)
	serveEcho(t, lis, []byte(bootstrap))
}

// TestWorkloadMTLSThroughTheSpoke is issue 4's end-to-end proof: workloads
// get certificates from their spoke's registration authority with their
// service-account tokens (checked by a TokenReview against a real API
// server; signed by the hub's mesh CA); a grpc-go xDS server and an xDS
// client, both talking mTLS to the hub, then talk mTLS to each other,
// authorization applies, and it all survives a hub restart.
func TestWorkloadMTLSThroughTheSpoke(t *testing.T) {
	lis, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	c := kubeCluster(t)
	c.Apply(t, []byte(workloadConfig(port)))
	a, h, sp := agentSpoke(t, c)

	t.Run("the registration authority refuses", func(t *testing.T) {
		_, _, err := a.request(t, a.token(t, "demo", "client"), "spiffe://cluster.local/ns/demo/sa/server")
		wantCode(t, "a client token asking for the server's identity", err, codes.PermissionDenied, "")
		_, _, err = a.request(t, a.token(t, "demo", "client"), "spiffe://other.example/ns/demo/sa/client")
		wantCode(t, "another trust domain", err, codes.PermissionDenied, "")
		_, _, err = a.request(t, "not-a-token", "spiffe://cluster.local/ns/demo/sa/client")
		wantCode(t, "a garbage token", err, codes.Unauthenticated, "")
	})

	serverDir := a.obtain(t, "demo", "server")
	clientDir := a.obtain(t, "demo", "client")
	startMTLSServer(t, h, lis, serverDir)
	const target = "xds:///echo.demo.svc.cluster.local:7070"
	tlsArgs := []string{"--namespace", "demo", "--xds-cert-dir", clientDir, "--xds-ca-file", servingcert.RootPath(h.state), "--interval", "50ms"}
	cl := startClient(t, h, target, "client-1.demo", tlsArgs...)

	t.Run("mTLS between workloads", func(t *testing.T) {
		for _, call := range cl.lastCalls(t, 5) {
			if call.Code != "OK" || call.Backend != "spiffe://cluster.local/ns/demo/sa/client" {
				t.Fatalf("call %+v; want OK, the server seeing the client's SPIFFE ID", call)
			}
		}
		// The server requires mTLS (STRICT): plain text is refused.
		conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", port), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err == nil {
			t.Error("a plaintext call to the STRICT server succeeded")
		}
	})

	t.Run("authorization", func(t *testing.T) {
		blocked := startClient(t, h, target, "client-2.demo", append(tlsArgs, "--header", "x-block=yes")...)
		for _, call := range blocked.lastCalls(t, 3) {
			if call.Code != codes.PermissionDenied.String() {
				t.Fatalf("call with x-block: %+v; want PermissionDenied", call)
			}
		}
	})

	t.Run("hub restart", func(t *testing.T) {
		servingRoot, _ := os.ReadFile(servingcert.RootPath(h.state))
		h.proc.Stop(10 * time.Second)
		h.start()
		for path, before := range map[string][]byte{filepath.Join(h.state, "ca", "default", "root-cert.pem"): a.meshRoot, servingcert.RootPath(h.state): servingRoot} {
			if after, err := os.ReadFile(path); err != nil || string(after) != string(before) {
				t.Errorf("%s changed across the restart (%v)", path, err)
			}
		}
		h.waitSynced(t, "default/c1")
		if n := strings.Count(sp.proc.Log(), `msg=enrolled`); n != 1 {
			t.Errorf("the spoke enrolled %d times; want once (its certificate outlives the restart)", n)
		}
		for _, call := range cl.lastCalls(t, 5) {
			if call.Code != "OK" {
				t.Fatalf("after the hub restart: %+v", call)
			}
		}
		// The workloads' certificates still verify, and a new one comes
		// from the RA as before.
		if dir := a.obtain(t, "demo", "client"); dir == "" {
			t.Error("no certificate after the restart")
		}
	})
}
