package proxyless_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/navemesh/nave/internal/xdstest"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/shared/xdsbootstrap"
	"github.com/navemesh/nave/xds/gen"
	"github.com/navemesh/nave/xds/gen/gentest"
	"github.com/navemesh/nave/xds/gen/proxyless"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
)

var grpcServerKey = proxy.Key{Type: proxy.GRPC, Mesh: "m", Namespace: "foo", Labels: "app=httpbin", IPs: "10.0.0.5"}

// TestGRPCServerListeners: a proxyless workload's server listeners, one
// per served port under both wildcard listening addresses, validate and
// carry what grpc-go accepts.
func TestGRPCServerListeners(t *testing.T) {
	snap := mesh.Build("m", []mesh.ClusterInput{{Name: "c1", Synced: true, Connected: true,
		Objects: gentest.Decode(t, gentest.SecurityMesh+gentest.PeerAuthentication("foo", "STRICT")+gentest.AuthorizationPolicies)}})
	rs, problems := proxyless.ServerListeners(snap, grpcServerKey)
	if len(problems) > 0 {
		t.Errorf("problems: %v", problems)
	}
	var names []string
	for _, r := range rs {
		names = append(names, r.Name)
		l := r.Message.(*listenerv3.Listener)
		if len(l.GetListenerFilters()) != 0 || len(l.GetFilterChains()) != 0 || l.GetDefaultFilterChain() == nil {
			t.Errorf("%s: grpc-go takes one default filter chain and no listener filters: %v", r.Name, l)
		}
		if l.GetDefaultFilterChain().GetTransportSocket() == nil {
			t.Errorf("%s: STRICT without TLS", r.Name)
		}
	}
	gentest.ValidateDeep(t, &gen.Output{Resources: map[string][]gen.Resource{typeurl.Listener: rs}})
	want := []string{proxyless.ServerListenerName("0.0.0.0:80"), proxyless.ServerListenerName("0.0.0.0:9000"),
		proxyless.ServerListenerName("[::]:80"), proxyless.ServerListenerName("[::]:9000")}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("listeners %v, want %v", names, want)
	}
	if _, _, err := proxyless.ServerListener(snap, grpcServerKey, "grpc/server?xds.resource.listening_address=nope"); err == nil {
		t.Error("a name without a port is accepted")
	}
	// A header grpc-go refuses to match is reported, not generated.
	snap = mesh.Build("m", []mesh.ClusterInput{{Name: "c1", Synced: true, Connected: true, Objects: gentest.Decode(t, gentest.SecurityMesh+`
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: grpc-header, namespace: foo}
spec: {rules: [{when: [{key: "request.headers[grpc-timeout]", values: ["1s"]}]}]}
`)}})
	_, problems, err := proxyless.ServerListener(snap, grpcServerKey, proxyless.ServerListenerName("0.0.0.0:80"))
	if err != nil || len(problems) != 1 || problems[0].Field != "spec.rules[0].when[0].key" || !strings.Contains(problems[0].Reason, "A41") {
		t.Errorf("problems %v, err %v", problems, err)
	}
}

// TestGRPCServerEnforces runs a real grpc-go xDS server (xds.NewGRPCServer)
// on generated listeners and calls it: mTLS required under STRICT,
// AuthorizationPolicy enforced by principal, IP block, path and header.
func TestGRPCServerEnforces(t *testing.T) {
	pki := newTestPKI(t)
	sleep := pki.client(t, "spiffe://cluster.local/ns/bar/sa/sleep")
	other := pki.client(t, "spiffe://cluster.local/ns/bar/sa/other")
	foreign := pki.client(t, "spiffe://other.example/ns/bar/sa/sleep")
	partner := pki.client(t, "spiffe://partner.example/ns/bar/sa/sleep")
	for _, tc := range []struct {
		name   string
		config string
		calls  []grpcCall
	}{
		{"STRICT, allow a principal", gentest.PeerAuthentication("foo", "STRICT") + `
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: sleep-only, namespace: foo}
spec:
  rules:
  - from: [{source: {principals: [cluster.local/ns/bar/sa/sleep]}}]
    to: [{operation: {paths: ["/grpc.health.v1.Health/*"]}}]
`, []grpcCall{
			{cert: &sleep, want: codes.OK},
			{cert: &other, want: codes.PermissionDenied},
			{plain: true, want: codes.Unavailable},
		}},
		{"STRICT, allow trust domains, deny one (grpc-go's handshake admits any identity the CA signed)", gentest.PeerAuthentication("foo", "STRICT") + `
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: domains, namespace: foo}
spec:
  rules:
  - from: [{source: {trustDomains: [cluster.local, "*.example"], notTrustDomains: ["partner.*"]}}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: no-other, namespace: foo}
spec:
  action: DENY
  rules: [{when: [{key: source.trustDomain, values: [other.example]}]}]
`, []grpcCall{
			{cert: &sleep, want: codes.OK},
			{cert: &foreign, want: codes.PermissionDenied},
			{cert: &partner, want: codes.PermissionDenied},
		}},
		{"plain text, allow by IP block and path, deny by header", `
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: local, namespace: foo}
spec:
  rules: [{from: [{source: {ipBlocks: [127.0.0.1]}}], to: [{operation: {paths: [/grpc.health.v1.Health/Check]}}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: blocked, namespace: foo}
spec:
  action: DENY
  rules: [{when: [{key: "request.headers[x-block]", values: ["yes"]}]}]
`, []grpcCall{
			{plain: true, want: codes.OK},
			{plain: true, header: "yes", want: codes.PermissionDenied},
			{plain: true, watch: true, want: codes.PermissionDenied},
		}},
		{"plain text, path templates (a regex for grpc-go)", `
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: checks, namespace: foo}
spec: {rules: [{to: [{operation: {paths: ["/{*}/Check", "/other.Service/{**}"]}}]}]}
`, []grpcCall{
			{plain: true, want: codes.OK},
			{plain: true, watch: true, want: codes.PermissionDenied},
		}},
		{"plain text, deny by path template", `
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: no-checks, namespace: foo}
spec: {action: DENY, rules: [{to: [{operation: {paths: ["/{**}/Check"]}}]}]}
`, []grpcCall{
			{plain: true, want: codes.PermissionDenied},
			{plain: true, watch: true, want: codes.OK},
		}},
		{"plain text, allow another IP block", `
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: remote, namespace: foo}
spec: {rules: [{from: [{source: {ipBlocks: [10.0.0.0/8]}}]}]}
`, []grpcCall{{plain: true, want: codes.PermissionDenied}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := mesh.Build("m", []mesh.ClusterInput{{Name: "c1", Synced: true, Connected: true, Objects: gentest.Decode(t, gentest.SecurityMesh+tc.config)}})
			addr := serveXDS(t, pki, func(name string) (*listenerv3.Listener, error) {
				l, problems, err := proxyless.ServerListener(snap, grpcServerKey, name)
				if len(problems) > 0 {
					t.Errorf("problems: %v", problems)
				}
				return l, err
			})
			for i, c := range tc.calls {
				if got := c.do(t, addr, pki); got != c.want {
					t.Errorf("call %d (%+v): %s, want %s", i, c, got, c.want)
				}
			}
		})
	}
}

type grpcCall struct {
	cert   *tls.Certificate
	plain  bool
	header string // x-block
	watch  bool   // Health/Watch instead of Health/Check
	want   codes.Code
}

func (c grpcCall) do(t *testing.T, addr string, pki *testPKI) codes.Code {
	t.Helper()
	creds := insecure.NewCredentials()
	if !c.plain {
		creds = credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{*c.cert}, RootCAs: pki.pool, ServerName: "127.0.0.1"})
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c.header != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-block", c.header)
	}
	client := healthpb.NewHealthClient(conn)
	if c.watch {
		stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = stream.Recv()
		}
		return status.Code(err)
	}
	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{})
	return status.Code(err)
}

// serveXDS starts an ADS server answering listener requests with
// listener(name), and a grpc-go xDS server on 127.0.0.1 whose bootstrap
// points at it, with the test PKI as certificate provider "default". It
// returns once the server serves, with its address.
func serveXDS(t *testing.T, pki *testPKI, listener func(name string) (*listenerv3.Listener, error)) string {
	t.Helper()
	ads := &testADS{t: t, listener: listener}
	adsLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	adsSrv := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(adsSrv, ads)
	go func() { _ = adsSrv.Serve(adsLis) }()
	t.Cleanup(adsSrv.Stop)

	bootstrap, err := xdsbootstrap.New(adsLis.Addr().String(), "grpc-server~"+t.Name(), nil, nil).
		WithServerListenerTemplate(proxyless.ServerListenerPrefix+"%s").
		WithFileWatcher(proxyless.CertificateProvider, pki.serverCert, pki.serverKey, pki.caFile, "600s").JSON()
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	xdstest.ServeHealth(t, lis, bootstrap, 10*time.Second)
	if n := ads.nacks(); len(n) > 0 {
		t.Fatalf("grpc-go refused the listener: %v", n)
	}
	return lis.Addr().String()
}

// testADS answers listener requests by name (state of the world).
type testADS struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	t        *testing.T
	listener func(name string) (*listenerv3.Listener, error)
	mu       sync.Mutex
	nacked   []string
}

func (a *testADS) nacks() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.nacked...)
}

func (a *testADS) StreamAggregatedResources(stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	sent := ""
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil
		}
		if d := req.GetErrorDetail(); d != nil {
			a.mu.Lock()
			a.nacked = append(a.nacked, d.GetMessage())
			a.mu.Unlock()
			continue
		}
		if req.GetTypeUrl() != typeurl.Listener || strings.Join(req.GetResourceNames(), ",") == sent {
			continue
		}
		sent = strings.Join(req.GetResourceNames(), ",")
		resp := &discoveryv3.DiscoveryResponse{TypeUrl: typeurl.Listener, VersionInfo: "1", Nonce: sent}
		for _, name := range req.GetResourceNames() {
			l, err := a.listener(name)
			if err != nil {
				a.t.Errorf("listener %s: %v", name, err)
				continue
			}
			a, err := anypb.New(l)
			if err != nil {
				return err
			}
			resp.Resources = append(resp.Resources, a)
		}
		if err := stream.Send(resp); err != nil {
			return nil
		}
	}
}

// testPKI is a CA, a server certificate (127.0.0.1, the server's SPIFFE
// identity) in files for grpc-go's file_watcher, and client certificates.
type testPKI struct {
	ca                            *x509.Certificate
	caKey                         *ecdsa.PrivateKey
	pool                          *x509.CertPool
	caFile, serverCert, serverKey string
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test mesh root"}, IsCA: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	p := &testPKI{ca: ca, caKey: key, pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	dir := t.TempDir()
	p.caFile = filepath.Join(dir, "root.pem")
	writePEM(t, p.caFile, "CERTIFICATE", der)
	certDER, keyDER := p.issue(t, "spiffe://cluster.local/ns/foo/sa/httpbin", true)
	p.serverCert, p.serverKey = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writePEM(t, p.serverCert, "CERTIFICATE", certDER)
	writePEM(t, p.serverKey, "PRIVATE KEY", keyDER)
	return p
}

func (p *testPKI) issue(t *testing.T, spiffe string, server bool) (certDER, keyDER []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(spiffe)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), URIs: []*url.URL{u},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}}
	if server {
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	certDER, err = x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err = x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return certDER, keyDER
}

func (p *testPKI) client(t *testing.T, spiffe string) tls.Certificate {
	t.Helper()
	certDER, keyDER := p.issue(t, spiffe, false)
	c, err := tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certDER}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
