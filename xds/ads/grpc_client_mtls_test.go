package ads_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/xds"

	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/internal/xdstest"
	"github.com/navemesh/nave/shared/xdsbootstrap"
	"github.com/navemesh/nave/xds/gen/proxyless"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
)

const (
	mtlsHost     = "secure.demo.svc.cluster.local"
	clientSPIFFE = "spiffe://cluster.local/ns/demo/sa/client"
	serverSPIFFE = "spiffe://cluster.local/ns/demo/sa/server"
)

// workloadCerts writes a test mesh root and a leaf certificate for each
// SPIFFE ID into a temporary folder, as grpc-go's file_watcher
// certificate provider reads them; it returns the files of each identity.
func workloadCerts(t *testing.T, ids ...string) map[string]xdsbootstrap.FileWatcher {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	rootKey := newKey()
	rootTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test mesh root"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	rootDER, err := x509.CreateCertificate(rand.Reader, rootTmpl, rootTmpl, &rootKey.PublicKey, rootKey)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := x509.ParseCertificate(rootDER)
	rootFile := write("root.pem", "CERTIFICATE", rootDER)
	out := map[string]xdsbootstrap.FileWatcher{}
	for i, id := range ids {
		u, err := url.Parse(id)
		if err != nil {
			t.Fatal(err)
		}
		key := newKey()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(i + 2)), URIs: []*url.URL{u},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, root, &key.PublicKey, rootKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		name := id[strings.LastIndex(id, "/")+1:]
		out[id] = xdsbootstrap.FileWatcher{
			CertificateFile:   write(name+"-cert.pem", "CERTIFICATE", der),
			PrivateKeyFile:    write(name+"-key.pem", "PRIVATE KEY", keyDER),
			CACertificateFile: rootFile,
			RefreshInterval:   "1s",
		}
	}
	return out
}

// proxylessBootstrap is a grpc-go bootstrap for the fixture's ADS with
// node id and metadata, and certificate providers.
func proxylessBootstrap(t *testing.T, f *fixture, id string, meta map[string]any, files xdsbootstrap.FileWatcher) []byte {
	t.Helper()
	b, err := xdsbootstrap.New(f.addr, id, meta, nil).WithServerListenerTemplate(proxyless.ServerListenerPrefix+"%s").
		WithFileWatcher(proxyless.CertificateProvider, files.CertificateFile, files.PrivateKeyFile, files.CACertificateFile, files.RefreshInterval).JSON()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// mtlsConfig is a MESH_INTERNAL ServiceEntry for a server on
// 127.0.0.1:port, STRICT mTLS for namespace demo, the given
// DestinationRule tls (none if empty) and the given ALLOW principal, and a
// DENY on header x-block.
func mtlsConfig(port int, drTLS, allowPrincipal string) string {
	y := fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: secure, namespace: demo}
spec:
  hosts: [%s]
  location: MESH_INTERNAL
  ports: [{number: 7070, name: grpc, protocol: GRPC, targetPort: %d}]
  resolution: STATIC
  endpoints: [{address: 127.0.0.1, labels: {app: secure}}]
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: strict, namespace: demo}
spec: {mtls: {mode: STRICT}}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: callers, namespace: demo}
spec:
  selector: {matchLabels: {app: secure}}
  rules: [{from: [{source: {principals: [%s]}}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: blocked, namespace: demo}
spec:
  action: DENY
  rules: [{when: [{key: "request.headers[x-block]", values: ["yes"]}]}]
`, mtlsHost, port, allowPrincipal)
	if drTLS != "" {
		y += fmt.Sprintf(`---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: secure, namespace: demo}
spec:
  host: %s
  trafficPolicy: {tls: %s}
`, mtlsHost, drTLS)
	}
	return y
}

// TestProxylessClientMTLS: a real grpc-go xDS client, dialing xds:/// with
// xDS credentials, talks mTLS to a real grpc-go xDS server when the hub's
// DestinationRule says ISTIO_MUTUAL: the certificates come from the
// client's own certificate provider (file_watcher), the server sees the
// client's SPIFFE ID and authorizes by it; without the rule the client
// talks plain text and the STRICT server refuses it.
func TestProxylessClientMTLS(t *testing.T) {
	lis, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	f := newFixture(t, nil)
	set := func(t *testing.T, drTLS, allow string) {
		t.Helper()
		f.set(t, "m", mesh.ClusterInput{Name: "c1", Synced: true, Connected: true, Objects: pushctxtest.Decode(t, mtlsConfig(port, drTLS, allow))})
	}
	set(t, "{mode: ISTIO_MUTUAL}", "cluster.local/ns/demo/sa/client")
	providers := workloadCerts(t, serverSPIFFE, clientSPIFFE)

	// The server records the identity of every caller it answers.
	var mu sync.Mutex
	var seen []string
	record := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req) // the xDS server's RBAC runs inside
		if err == nil {
			id := "(no client certificate)"
			if p, ok := peer.FromContext(ctx); ok {
				if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 && len(ti.State.PeerCertificates[0].URIs) == 1 {
					id = ti.State.PeerCertificates[0].URIs[0].String()
				}
			}
			mu.Lock()
			seen = append(seen, id)
			mu.Unlock()
		}
		return resp, err
	}
	xdstest.ServeHealth(t, lis, proxylessBootstrap(t, f, "secure-server", map[string]any{
		"GENERATOR": "grpc", "NAMESPACE": "demo", "LABELS": map[string]any{"app": "secure"}, "INSTANCE_IPS": "127.0.0.1"}, providers[serverSPIFFE]),
		waitFor, grpc.UnaryInterceptor(record))

	// newClient is a fresh proxyless client (its own xDS client and
	// resolver, from its own bootstrap) with the client's certificates.
	n := 0
	newClient := func(t *testing.T) healthpb.HealthClient {
		t.Helper()
		n++
		resolver, err := xds.NewXDSResolverWithConfigForTesting(proxylessBootstrap(t, f, fmt.Sprintf("secure-client-%d", n),
			map[string]any{"GENERATOR": "grpc", "NAMESPACE": "demo"}, providers[clientSPIFFE]))
		if err != nil {
			t.Fatal(err)
		}
		creds, err := xdscreds.NewClientCredentials(xdscreds.ClientOptions{FallbackCreds: insecure.NewCredentials()})
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient("xds:///"+mtlsHost+":7070", grpc.WithTransportCredentials(creds), grpc.WithResolvers(resolver))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return healthpb.NewHealthClient(conn)
	}
	check := func(c healthpb.HealthClient, md ...string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := c.Check(metadata.AppendToOutgoingContext(ctx, md...), &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		return err
	}
	// eventually retries a call until want says yes (config reaches the
	// client and server in its own time).
	eventually := func(t *testing.T, what string, c healthpb.HealthClient, want func(error) bool, md ...string) error {
		t.Helper()
		var err error
		testwait.For(t, waitFor, func() error {
			if err = check(c, md...); !want(err) {
				return fmt.Errorf("%s: last result %v", what, err)
			}
			return nil
		})
		return err
	}
	ok := func(err error) bool { return err == nil }
	denied := func(err error) bool { return status.Code(err) == codes.PermissionDenied }

	t.Run("ISTIO_MUTUAL", func(t *testing.T) {
		c := newClient(t)
		eventually(t, "call over mTLS", c, ok)
		mu.Lock()
		last := seen[len(seen)-1]
		mu.Unlock()
		if last != clientSPIFFE {
			t.Errorf("the server saw %q, want the client's SPIFFE ID %s", last, clientSPIFFE)
		}
		if err := check(c, "x-block", "yes"); !denied(err) {
			t.Errorf("call with x-block: %v, want PermissionDenied", err)
		}
		// The ALLOW rule matches the certificate's identity: naming
		// another principal refuses the client.
		set(t, "{mode: ISTIO_MUTUAL}", "cluster.local/ns/demo/sa/other")
		eventually(t, "call once only sa/other is allowed", c, denied)
		set(t, "{mode: ISTIO_MUTUAL}", "cluster.local/ns/demo/sa/client")
		eventually(t, "call once sa/client is allowed again", c, ok)
	})

	t.Run("server identity checked", func(t *testing.T) {
		// The client checks the server's certificate against the rule's
		// subjectAltNames (match_subject_alt_names): a name the server
		// does not have fails the handshake.
		set(t, "{mode: ISTIO_MUTUAL, subjectAltNames: [spiffe://cluster.local/ns/demo/sa/impostor]}", "cluster.local/ns/demo/sa/client")
		if err := check(newClient(t)); err == nil || !strings.Contains(err.Error(), "accepted SANs") {
			t.Errorf("call to a server without the rule's SAN: %v, want the client to refuse the server's SANs", err)
		}
		set(t, fmt.Sprintf("{mode: ISTIO_MUTUAL, subjectAltNames: [%s]}", serverSPIFFE), "cluster.local/ns/demo/sa/client")
		eventually(t, "call to the server with the rule's SAN", newClient(t), ok)
	})

	t.Run("no DestinationRule", func(t *testing.T) {
		// No auto-mTLS for proxyless: without the rule the client talks
		// plain text, which the STRICT server refuses.
		set(t, "", "cluster.local/ns/demo/sa/client")
		if err := check(newClient(t)); err == nil || !strings.Contains(err.Error(), "connection error") {
			t.Errorf("plain-text call to the STRICT server: %v, want the connection refused", err)
		}
	})

	t.Run("SIMPLE", func(t *testing.T) {
		// SIMPLE cannot be had by proxyless clients: no cluster (calls
		// fail, never in plain text), and the problem is reported.
		set(t, "{mode: SIMPLE, caCertificates: /etc/ca.pem}", "cluster.local/ns/demo/sa/client")
		if err := check(newClient(t)); err == nil {
			t.Error("a call through a SIMPLE rule succeeded")
		}
		st, _ := f.pc.Current("m")
		found := false
		for _, p := range f.c.Entry(st).AllProblems() {
			if p.Resource == "c1:DestinationRule demo/secure" && p.Field == "spec.trafficPolicy.tls.mode" && strings.Contains(p.Reason, "proxyless") {
				found = true
			}
		}
		if !found {
			t.Errorf("SIMPLE not reported; problems: %+v", f.c.Entry(st).AllProblems())
		}
	})
}
