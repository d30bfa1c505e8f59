package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	pb "istio.io/api/security/v1alpha1"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/hub/servingcert"
	"github.com/navemesh/nave/internal/kubetest"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/internal/xdstest"
	"github.com/navemesh/nave/shared/spiffeid"
)

// workloadConfig is the demo namespace's service accounts and mesh config:
// an echo service whose one endpoint is the test's xDS server on
// 127.0.0.1:PORT, STRICT mTLS for the namespace, ISTIO_MUTUAL for callers,
// and a DENY for calls carrying x-block.
func workloadConfig(port int) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: demo}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: server, namespace: demo}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: client, namespace: demo}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: demo}
spec:
  hosts: [echo.demo.svc.cluster.local]
  location: MESH_INTERNAL
  ports: [{number: 7070, name: grpc, protocol: GRPC, targetPort: %d}]
  resolution: STATIC
  endpoints: [{address: 127.0.0.1, labels: {app: echo}, serviceAccount: server}]
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: strict, namespace: demo}
spec: {mtls: {mode: STRICT}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: demo}
spec:
  host: echo.demo.svc.cluster.local
  trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: blocked, namespace: demo}
spec:
  selector: {matchLabels: {app: echo}}
  action: DENY
  rules: [{when: [{key: "request.headers[x-block]", values: ["yes"]}]}]
`, port)
}

// startSecureKubeSpoke starts a spoke watching c that enrolls with token
// and serves its registration authority on raAddr.
func startSecureKubeSpoke(t testing.TB, h *hub, cluster, token, raAddr string, c *kubetest.Cluster) *secureSpoke {
	t.Helper()
	work := t.TempDir()
	tokenFile := filepath.Join(work, "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &secureSpoke{spoke: &spoke{admin: harness.FreePort(t)}, state: filepath.Join(work, "state")}
	s.proc = harness.Start(t, "spoke-"+cluster, binary("nave-spoke"),
		"--source", "kubernetes", "--kubernetes.kubeconfig", c.Kubeconfig(t, spokeIdentity, "system:serviceaccounts"),
		"--cluster", cluster, "--hub.address", addr(h.spokes), "--admin.listen", addr(s.admin),
		"--hub.token-file", tokenFile, "--hub.ca-hash", h.pin(t), "--hub.state-dir", s.state, "--ra.listen", raAddr,
		"--hub.backoff-initial", "100ms", "--hub.backoff-max", "1s", "--log.level", "debug")
	harness.WaitReady(t, s.url("/healthz/ready"), 60*time.Second)
	return s
}

// agent obtains workload certificates from a spoke's registration
// authority, as an Istio agent would: with its service-account token.
type agent struct {
	cs       kubernetes.Interface
	ra       string
	raID     string // the spoke's cluster SPIFFE ID the RA must present
	meshRoot []byte
}

// raConn dials the RA, verifying its certificate against the mesh's roots
// and by its SPIFFE ID (it has no DNS name).
func (a *agent) raConn(t testing.TB) *grpc.ClientConn {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(a.meshRoot)
	raID, err := spiffeid.ParseClusterID(a.raID)
	if err != nil {
		t.Fatal(err)
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: true, // verified below, by SPIFFE ID
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			_, err := spiffeid.VerifyChain(raw, roots, x509.ExtKeyUsageServerAuth, raID)
			return err
		}}
	conn, err := grpc.NewClient(a.ra, grpc.WithTransportCredentials(credentials.NewTLS(conf)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// token is a service-account token of ns/sa for the RA's audience.
func (a *agent) token(t testing.TB, ns, sa string) string {
	t.Helper()
	exp := int64(600)
	tr, err := a.cs.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), sa,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{"istio-ca"}, ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// request asks the RA for a certificate of id with token; it returns the
// key and the answer.
func (a *agent) request(t *testing.T, token, id string) (*ecdsa.PrivateKey, *pb.IstioCertificateResponse, error) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	u, _ := url.Parse(id)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{u}}, key)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	resp, err := pb.NewIstioCertificateServiceClient(a.raConn(t)).CreateCertificate(ctx, &pb.IstioCertificateRequest{
		Csr: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})), ValidityDuration: 3600})
	return key, resp, err
}

// obtain gets ns/sa's certificate and writes it as navectl cert issue does
// (cert-chain.pem, key.pem, root-cert.pem) into a new directory.
func (a *agent) obtain(t *testing.T, ns, sa string) string {
	t.Helper()
	id := fmt.Sprintf("spiffe://cluster.local/ns/%s/sa/%s", ns, sa)
	key, resp, err := a.request(t, a.token(t, ns, sa), id)
	if err != nil {
		t.Fatalf("%s from the spoke's RA: %v", id, err)
	}
	chain := []byte(strings.Join(resp.GetCertChain(), ""))
	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
	pair, err := tls.X509KeyPair(chain, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(a.meshRoot)
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil || pair.Leaf.URIs[0].String() != id {
		t.Fatalf("the RA issued %v: %v", pair.Leaf.URIs, err)
	}
	dir := t.TempDir()
	for name, b := range map[string][]byte{"cert-chain.pem": chain, "root-cert.pem": a.meshRoot,
		"key.pem": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

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

// serveEcho runs a grpc-go xDS server on lis with bootstrap, answering
// health checks with the caller's SPIFFE ID in the x-nave-backend header.
func serveEcho(t *testing.T, lis net.Listener, bootstrap []byte) {
	t.Helper()
	xdstest.ServeHealth(t, lis, bootstrap, 30*time.Second,
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			caller := "no client certificate"
			if p, ok := peer.FromContext(ctx); ok {
				if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 && len(ti.State.PeerCertificates[0].URIs) == 1 {
					caller = ti.State.PeerCertificates[0].URIs[0].String()
				}
			}
			_ = grpc.SetHeader(ctx, metadata.Pairs("x-nave-backend", caller))
			return handler(ctx, req)
		}))
}

// lastCalls waits for n calls after the ones seen so far and returns them.
func (c *client) lastCalls(t *testing.T, n int) []call {
	t.Helper()
	start := len(c.calls())
	var out []call
	testwait.For(t, 30*time.Second, func() error {
		all := c.calls()
		if len(all) < start+n {
			return fmt.Errorf("%d calls so far", len(all)-start)
		}
		out = all[len(all)-n:]
		return nil
	})
	return out
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
	cs, err := kubernetes.NewForConfig(c.Admin)
	if err != nil {
		t.Fatal(err)
	}
	h := newSecureHub(t)
	raAddr := addr(harness.FreePort(t))
	sp := startSecureKubeSpoke(t, h, "c1", h.token(t, "default", "c1", "1h"), raAddr, c)
	h.waitSynced(t, "default/c1")
	meshRoot, err := os.ReadFile(filepath.Join(h.state, "ca", "default", "root-cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	a := &agent{cs: cs, ra: raAddr, raID: "spiffe://cluster.local/nave/cluster/c1", meshRoot: meshRoot}

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
		for path, before := range map[string][]byte{filepath.Join(h.state, "ca", "default", "root-cert.pem"): meshRoot, servingcert.RootPath(h.state): servingRoot} {
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
