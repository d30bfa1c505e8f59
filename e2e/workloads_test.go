package e2e

// Harness: workload identity: a spoke's registration authority as a
// workload's agent reaches it, nave-agent processes, and an mTLS echo
// server on the bootstrap a proxyless workload gets.

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
	"strconv"
	"strings"
	"testing"
	"time"

	pb "istio.io/api/security/v1alpha1"
	authnv1 "k8s.io/api/authentication/v1"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/navemesh/nave/e2e/harness"
	"github.com/navemesh/nave/hub/servingcert"
	"github.com/navemesh/nave/internal/kubetest"
	"github.com/navemesh/nave/internal/xdstest"
	"github.com/navemesh/nave/shared/spiffeid"
)

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

// podEnv is what an injected pod gives the agent container: the env the
// templates set (docs/agent.md), the downward API files and the projected
// token, all written by the test.
type podEnv struct {
	name, namespace, sa string
	labels              map[string]string
	mode                string
	extra               []string // more NAVE_* settings
}

// agentProc is a running nave-agent and the pod directories it uses.
type agentProc struct {
	proc   *harness.Proc
	dir    string // the nave-run volume
	status int
}

func (p *agentProc) url(path string) string {
	return fmt.Sprintf("http://127.0.0.1:%d%s", p.status, path)
}

// agentEnv is the environment of an agent container for pod, against the
// hub h and the spoke's RA at raAddr; it writes the pod's files into work.
func agentEnv(t testing.TB, a *agent, h *hub, raAddr string, pod podEnv, work string) ([]string, string, int) {
	t.Helper()
	dir := filepath.Join(work, "run")
	podinfo := filepath.Join(work, "podinfo")
	tokens := filepath.Join(work, "tokens")
	for _, d := range []string{dir, podinfo, tokens} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var labels strings.Builder
	for k, v := range pod.labels {
		fmt.Fprintf(&labels, "%s=%s\n", k, strconv.Quote(v))
	}
	hubCA, err := os.ReadFile(servingcert.RootPath(h.state))
	if err != nil {
		t.Fatal(err)
	}
	for path, data := range map[string]string{
		filepath.Join(podinfo, "labels"):      labels.String(),
		filepath.Join(podinfo, "annotations"): "sidecar.istio.io/inject=\"true\"\n",
		filepath.Join(tokens, "istio-token"):  a.token(t, pod.namespace, pod.sa),
	} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	status := harness.FreePort(t)
	env := []string{
		"NAVE_MODE=" + pod.mode, "NAVE_MESH=default", "NAVE_CLUSTER=c1", "NAVE_TRUST_DOMAIN=cluster.local",
		"NAVE_POD_NAME=" + pod.name, "NAVE_POD_NAMESPACE=" + pod.namespace, "NAVE_POD_SERVICE_ACCOUNT=" + pod.sa,
		"NAVE_POD_IP=127.0.0.1", "NAVE_POD_NODE=node-1",
		"NAVE_POD_LABELS_FILE=" + filepath.Join(podinfo, "labels"), "NAVE_POD_ANNOTATIONS_FILE=" + filepath.Join(podinfo, "annotations"),
		"NAVE_RA_ADDRESS=" + raAddr, "NAVE_RA_IDENTITY=spiffe://cluster.local/nave/cluster/c1",
		"NAVE_RA_TOKEN_FILE=" + filepath.Join(tokens, "istio-token"),
		"NAVE_TRUST_MESH_ROOTS=" + string(a.meshRoot), "NAVE_TRUST_HUB_CA=" + string(hubCA),
		"NAVE_XDS_ADDRESS=" + addr(h.xds), "NAVE_DIR=" + dir, "NAVE_STATUS_LISTEN=" + addr(status),
		"NAVE_ENVOY_BINARY=" + filepath.Join(work, "no-envoy-here"), "NAVE_ENVOY_ADMIN_PORT=" + strconv.Itoa(harness.FreePort(t)),
		"NAVE_ENVOY_READY_PORT=" + strconv.Itoa(harness.FreePort(t)), "NAVE_LOG_LEVEL=debug",
	}
	return append(env, pod.extra...), dir, status
}

// startAgent runs nave-agent as pod and waits until it reports ready.
func startAgent(t testing.TB, a *agent, h *hub, raAddr string, pod podEnv) *agentProc {
	t.Helper()
	env, dir, status := agentEnv(t, a, h, raAddr, pod, t.TempDir())
	p := &agentProc{proc: harness.StartEnv(t, "agent-"+pod.name, binary("nave-agent"), env), dir: dir, status: status}
	harness.WaitReady(t, p.url("/healthz/ready"), 60*time.Second)
	return p
}

// agentWorld is a real API server with the demo namespace, a TLS hub and
// a spoke serving its RA; lis is where the echo endpoint of the demo's
// config listens.
func agentWorld(t testing.TB, hubArgs ...string) (*agent, *hub, string, net.Listener) {
	t.Helper()
	lis, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	c := kubeCluster(t)
	c.Apply(t, []byte(workloadConfig(lis.Addr().(*net.TCPAddr).Port)))
	a, h, _ := agentSpoke(t, c, hubArgs...)
	return a, h, a.ra, lis
}

// agentSpoke is a TLS hub and the enrolled spoke of cluster c1 on the API
// server c, serving its RA; a is what a workload of c knows of them.
func agentSpoke(t testing.TB, c *kubetest.Cluster, hubArgs ...string) (a *agent, h *hub, sp *secureSpoke) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.Admin)
	if err != nil {
		t.Fatal(err)
	}
	h = newSecureHub(t, hubArgs...)
	raAddr := addr(harness.FreePort(t))
	sp = startSecureKubeSpoke(t, h, "c1", h.token(t, "default", "c1", "1h"), raAddr, c)
	h.waitSynced(t, "default/c1")
	meshRoot, err := os.ReadFile(filepath.Join(h.state, "ca", "default", "root-cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	return &agent{cs: cs, ra: raAddr, raID: "spiffe://cluster.local/nave/cluster/c1", meshRoot: meshRoot}, h, sp
}
