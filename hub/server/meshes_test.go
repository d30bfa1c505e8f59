package server

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/hub/enroll"
	"github.com/navemesh/nave/hub/servingcert"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/admin"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/ads"
	"github.com/navemesh/nave/xds/ads/adstest"
)

// tlsHub is a hub serving TLS in-process, with its state dir.
type tlsHub struct {
	*Server
	state string
}

// startTLSHub starts a hub serving TLS on free ports with ca.meshes'
// default mesh; it stops when the test ends.
func startTLSHub(t *testing.T) *tlsHub { return startTLSHubIn(t, t.TempDir()) }

// startTLSHubIn is startTLSHub on the state dir state, with more flags.
func startTLSHubIn(t testing.TB, state string, flags ...string) *tlsHub {
	t.Helper()
	s, _ := runHub(t, append([]string{"--state.dir=" + state}, flags...)...)
	return &tlsHub{Server: s, state: state}
}

// dial connects to the listener of key over TLS, trusting the hub's
// serving CA and presenting cert (none if nil).
func (h *tlsHub) dial(t *testing.T, key string, cert *tls.Certificate) *grpc.ClientConn {
	t.Helper()
	b, err := os.ReadFile(servingcert.RootPath(h.state))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(b)
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: "localhost"}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	conn, err := grpc.NewClient(h.Addr(key).String(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// token creates a join token for (mesh, cluster) as navectl does: in the
// enrollment store of the hub's state dir.
func (h *tlsHub) token(t *testing.T, mesh, cluster string) string {
	t.Helper()
	st, err := enroll.OpenStateDir(h.state)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := st.CreateToken(t.Context(), mesh, cluster, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// enroll trades token for a cluster certificate.
func (h *tlsHub) enroll(t *testing.T, token string) (tls.Certificate, *protocolv1.EnrollResponse, error) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "spoke"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Timeout)
	defer cancel()
	resp, err := protocolv1.NewEnrollmentClient(h.dial(t, "spokes.listen", nil)).Enroll(ctx,
		&protocolv1.EnrollRequest{Token: token, CsrPem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})})
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(resp.GetCertChainPem(), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	return cert, resp, nil
}

// stream is an open spoke stream (Push or Watch) read until it ends.
type stream struct {
	done chan struct{}
	err  error

	mu  sync.Mutex
	got []*discoveryv3.DeltaDiscoveryResponse // Watch: what it received
}

// received returns the Watch responses received so far.
func (s *stream) received() []*discoveryv3.DeltaDiscoveryResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

// ended waits for the stream to end and returns its error.
func (s *stream) ended(t *testing.T) error {
	t.Helper()
	select {
	case <-s.done:
		return s.err
	case <-time.After(testwait.Timeout):
		t.Fatal("stream did not end")
		return nil
	}
}

func spokeContext(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), protocol.MetadataProtocol, protocol.Version))
	t.Cleanup(cancel)
	return ctx
}

// push opens a Push stream presenting cert and sends the synced marker;
// it returns once the hub ACKed it, or the error it was refused with.
func (h *tlsHub) push(t *testing.T, cert tls.Certificate) (*stream, error) {
	t.Helper()
	ps, err := protocolv1.NewSyncClient(h.dial(t, "spokes.listen", &cert)).Push(spokeContext(t))
	if err != nil {
		return nil, err
	}
	if err := ps.Send(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: protocol.SyncedTypeURL, Nonce: "1", SystemVersionInfo: protocol.Version}); err != nil {
		_, err = ps.Recv()
		return nil, err
	}
	if _, err := ps.Recv(); err != nil {
		return nil, err
	}
	s := &stream{done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			if _, err := ps.Recv(); err != nil {
				s.err = err
				return
			}
		}
	}()
	return s, nil
}

// watch opens a Watch stream presenting cert and reads it, recording
// what it receives, until it ends.
func (h *tlsHub) watch(t *testing.T, cert tls.Certificate) *stream {
	t.Helper()
	ws, err := protocolv1.NewSyncClient(h.dial(t, "spokes.listen", &cert)).Watch(spokeContext(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, typeURL := range append(protocol.WatchTypeURLs(), protocol.SyncedTypeURL) {
		if err := ws.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeURL}); err != nil {
			t.Fatal(err)
		}
	}
	s := &stream{done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			r, err := ws.Recv()
			if err != nil {
				s.err = err
				return
			}
			s.mu.Lock()
			s.got = append(s.got, r)
			s.mu.Unlock()
		}
	}()
	return s
}

// proxyCert mints a workload certificate of mesh (shop/web) from the hub's
// CA, as a spoke's registration authority would obtain one.
func (h *tlsHub) proxyCert(t *testing.T, mesh, trustDomain string) tls.Certificate {
	t.Helper()
	id, err := ca.WorkloadID(trustDomain, "shop", "web")
	if err != nil {
		t.Fatal(err)
	}
	m, err := h.sec.authority.Mint(t.Context(), mesh, ca.SignOptions{Identities: []ca.ID{id}})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(m.ChainPEM, m.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// proxy opens an ADS stream of a proxy presenting cert, naming mesh.
func (h *tlsHub) proxy(t *testing.T, cert tls.Certificate, id, mesh string) *adstest.Proxy {
	t.Helper()
	n := &corev3.Node{Id: id, Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{ads.MetadataMesh: structpb.NewStringValue(mesh)}}}
	return adstest.Connect(t, h.dial(t, "xds.listen", &cert), n)
}

// create creates mesh acme (acme.example) through the hub's tenants
// Service, as the operator API does; the replica serves it when Create
// returns.
func (h *tlsHub) create(t *testing.T) {
	t.Helper()
	doc := "apiVersion: nave.io/v1alpha1\nkind: Mesh\nmetadata: {name: acme}\nspec: {trustDomain: acme.example}\n"
	if _, err := h.svc.Create(t.Context(), []byte(doc)); err != nil {
		t.Fatal(err)
	}
}

// remove deletes mesh acme through the Service, as the operator API does:
// the replica stops serving it when Delete returns; Run purges it.
func (h *tlsHub) remove(t *testing.T, keepCA bool) {
	t.Helper()
	if _, err := h.svc.Delete(t.Context(), "acme", keepCA); err != nil {
		t.Fatal(err)
	}
}

// waitGone waits until the Service has purged mesh acme and removed it.
func (h *tlsHub) waitGone(t *testing.T) {
	t.Helper()
	testwait.For(t, testwait.Timeout, func() error {
		if m, ok := h.meshes.Get("acme"); ok {
			return fmt.Errorf("mesh acme is still %s", m.Phase)
		}
		return nil
	})
}

func wantCode(t *testing.T, what string, err error, code codes.Code, want string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), want) {
		t.Errorf("%s: %v; want %s containing %q", what, err, code, want)
	}
}

// TestMeshLifeAtRuntime: a mesh added to the registry of a running hub
// gets its CA and is enrollable at once, its spoke's streams and its
// proxies are served as of it; marked Deleting, its spokes' Push and
// Watch streams and its proxies are cut off and every credential of it is
// refused; purged and re-created, it inherits nothing (new CA, no
// enrollment, old tokens and certificates refused).
func TestMeshLifeAtRuntime(t *testing.T) {
	h := startTLSHub(t)
	if _, err := h.sec.authority.TrustDomain("acme"); err == nil {
		t.Fatal("mesh acme has a CA before it was created")
	}

	// Created: enrollable at once.
	created := time.Now()
	h.create(t)
	cert, resp, err := h.enroll(t, h.token(t, "acme", "east"))
	if err != nil {
		t.Fatalf("enroll into the mesh just created: %v", err)
	}
	t.Logf("from the mesh's creation to an accepted enrollment: %s", time.Since(created).Round(time.Microsecond))
	if resp.GetMesh() != "acme" || resp.GetCluster() != "east" {
		t.Fatalf("enrolled as %s/%s", resp.GetMesh(), resp.GetCluster())
	}
	firstRoots := resp.GetTrustBundlePem()
	pending := h.token(t, "acme", "west") // outlives the mesh, unused
	ps, err := h.push(t, cert)
	if err != nil {
		t.Fatalf("push of the new mesh's cluster: %v", err)
	}
	ws := h.watch(t, cert)
	proxyCert := h.proxyCert(t, "acme", "acme.example")
	px := h.proxy(t, proxyCert, "web-1", "acme")
	px.Subscribe(typeurl.Cluster)
	px.Next(typeurl.Cluster)
	if got := h.eng.ADS().Status(); len(got) != 1 || got[0].Mesh != "acme" {
		t.Fatalf("proxies: %+v; want one of mesh acme", got)
	}
	if n := h.ConnectedSpokes("acme"); n != 1 {
		t.Errorf("ConnectedSpokes(acme) = %d, want 1", n)
	}
	if err := h.Purge(t.Context(), "acme", false); err == nil {
		t.Error("Purge of a served mesh: no error")
	}

	// Deleting: everything of it is cut off, on this replica at once.
	h.remove(t, false)
	wantCode(t, "push stream of the deleted mesh", ps.ended(t), codes.PermissionDenied, "mesh acme is being deleted")
	wantCode(t, "watch stream of the deleted mesh", ws.ended(t), codes.PermissionDenied, "mesh acme is being deleted")
	wantCode(t, "proxy stream of the deleted mesh", px.Ended(), codes.PermissionDenied, "mesh acme is being deleted")
	if n := h.ConnectedSpokes("acme"); n != 0 {
		t.Errorf("ConnectedSpokes(acme) = %d after the delete, want 0", n)
	}
	_, err = h.push(t, cert)
	wantCode(t, "push with a deleted mesh's certificate", err, codes.Unauthenticated, "acme.example")
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Timeout)
	defer cancel()
	again := h.proxy(t, proxyCert, "web-2", "acme")
	again.Subscribe(typeurl.Cluster)
	wantCode(t, "proxy with a deleted mesh's certificate", again.Ended(), codes.Unauthenticated, "")
	// Before the purge the token is refused as of a mesh not served,
	// after it as unknown.
	if _, _, err = h.enroll(t, pending); status.Code(err) != codes.PermissionDenied && status.Code(err) != codes.Unauthenticated {
		t.Errorf("enroll with a deleted mesh's token: %v; want it refused", err)
	}
	_, err = protocolv1.NewEnrollmentClient(h.dial(t, "spokes.listen", &cert)).Renew(ctx, &protocolv1.RenewRequest{})
	if status.Code(err) != codes.Unauthenticated && status.Code(err) != codes.PermissionDenied {
		t.Errorf("renew with a deleted mesh's certificate: %v; want it refused", err)
	}

	// Purged, then removed; re-created with the name, it inherits nothing.
	h.waitGone(t)
	h.create(t)
	_, _, err = h.enroll(t, pending)
	wantCode(t, "enroll with the deleted incarnation's token", err, codes.Unauthenticated, "")
	_, err = h.push(t, cert)
	wantCode(t, "push with the deleted incarnation's certificate", err, codes.Unauthenticated, "")
	again = h.proxy(t, proxyCert, "web-3", "acme")
	again.Subscribe(typeurl.Cluster)
	wantCode(t, "proxy with the deleted incarnation's certificate", again.Ended(), codes.Unauthenticated, "")
	_, resp, err = h.enroll(t, h.token(t, "acme", "east"))
	if err != nil {
		t.Fatalf("enroll into the re-created mesh: %v", err)
	}
	if bytes.Equal(resp.GetTrustBundlePem(), firstRoots) {
		t.Error("the re-created mesh has the deleted one's root")
	}
}

// TestKeepCAKeepsTheRootOnly: a mesh purged with keepCA comes back with
// its root, and still without its enrollments.
func TestKeepCAKeepsTheRootOnly(t *testing.T) {
	h := startTLSHub(t)
	h.create(t)
	cert, resp, err := h.enroll(t, h.token(t, "acme", "east"))
	if err != nil {
		t.Fatal(err)
	}
	h.remove(t, true)
	h.waitGone(t)
	h.create(t)
	roots, err := h.sec.authority.RootsPEM("acme")
	if err != nil || !bytes.Equal(roots, resp.GetTrustBundlePem()) {
		t.Errorf("re-created mesh's roots: %v; want the kept root", err)
	}
	_, err = h.push(t, cert)
	wantCode(t, "push with the deleted incarnation's certificate", err, codes.Unauthenticated, "")
}

// TestOperatorViewsShowTheRegistryScoped: /debug/meshes and
// /debug/security list the registry's meshes, including one created at
// runtime that has no push context yet; a tenant operator of one mesh
// sees only its own.
func TestOperatorViewsShowTheRegistryScoped(t *testing.T) {
	h := startTLSHub(t)
	h.create(t)
	get := func(scope admin.Scope, path string) string {
		rec := httptest.NewRecorder()
		h.adm.OperatorHandler(func(*http.Request) (admin.Scope, error) { return scope, nil }).
			ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Body.String()
	}
	names := func(body string) []string {
		var ms []struct {
			Mesh  string `json:"mesh"`
			Phase string `json:"phase"`
		}
		if err := json.Unmarshal([]byte(body), &ms); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		var out []string
		for _, m := range ms {
			out = append(out, m.Mesh+"/"+m.Phase)
		}
		return out
	}
	vendor := admin.Scope{Operator: "vendor", Vendor: true}
	if got := names(get(vendor, "/debug/meshes")); !slices.Equal(got, []string{"acme/Active", "default/Active"}) {
		t.Errorf("vendor /debug/meshes: %v", got)
	}
	if got := names(get(admin.Scope{Operator: "acme-op", Mesh: "acme"}, "/debug/meshes")); !slices.Equal(got, []string{"acme/Active"}) {
		t.Errorf("acme's operator /debug/meshes: %v; want acme only", got)
	}
	if got := names(get(admin.Scope{Operator: "default-op", Mesh: "default"}, "/debug/meshes")); !slices.Equal(got, []string{"default/Active"}) {
		t.Errorf("default's operator /debug/meshes: %v; want default only", got)
	}
	if body := get(admin.Scope{Operator: "acme-op", Mesh: "acme"}, "/debug/security"); strings.Contains(body, "default") {
		t.Errorf("acme's operator read /debug/security: %s", body)
	}
	if body := get(vendor, "/debug/security"); !strings.Contains(body, `"name": "acme"`) || !strings.Contains(body, `"phase": "Active"`) ||
		!strings.Contains(body, `"ca": true`) {
		t.Errorf("vendor /debug/security of a mesh served: %s", body)
	}
	h.remove(t, false)
	h.waitGone(t)
	if got := names(get(vendor, "/debug/meshes")); !slices.Equal(got, []string{"default/Active"}) {
		t.Errorf("vendor /debug/meshes after the delete: %v", got)
	}
}

// TestOneMeshsBrokenCADoesNotStopTheOthers: a mesh whose plugged-in CA
// does not load is not served (its tokens are refused), and the hub
// starts and serves every other mesh.
func TestOneMeshsBrokenCADoesNotStopTheOthers(t *testing.T) {
	state := t.TempDir()
	broken := filepath.Join(state, "ca", "broken")
	if err := os.MkdirAll(broken, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ca-cert.pem", "ca-key.pem", "cert-chain.pem", "root-cert.pem"} {
		if err := os.WriteFile(filepath.Join(broken, f), []byte("not PEM"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	h := startTLSHubIn(t, state, "--ca.meshes=default=cluster.local,broken=broken.example")
	if _, err := h.sec.authority.TrustDomain("broken"); err == nil {
		t.Fatal("mesh broken has a CA")
	}
	if _, _, err := h.enroll(t, h.token(t, "default", "east")); err != nil {
		t.Fatalf("enroll into mesh default beside a broken one: %v", err)
	}
	if _, _, err := h.enroll(t, h.token(t, "broken", "east")); err == nil {
		t.Fatal("enrolled into the mesh whose CA does not load")
	}
}

// meshConfigs returns the MeshConfigs s received after its first skip
// responses, in order, by the name of the mesh they are of.
func meshConfigs(t *testing.T, s *stream, skip int) (names []string, configs []*meshv1alpha1.MeshConfig) {
	t.Helper()
	for _, r := range s.received()[skip:] {
		if r.GetTypeUrl() != protocol.MeshConfigTypeURL {
			continue
		}
		for _, res := range r.GetResources() {
			cfg, err := protocol.DecodeMeshConfig(res.GetName(), res)
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, res.GetName())
			configs = append(configs, cfg)
		}
	}
	return names, configs
}

// TestMeshConfigChangeReachesItsMeshOnly: a MeshConfig changed at runtime
// (navectl mesh update: Service.Update) is sent on Watch to its mesh's
// spoke, as protocol.MeshConfigTypeURL, and to no spoke of another mesh:
// the next MeshConfig another mesh's spoke receives is its own mesh's
// change.
func TestMeshConfigChangeReachesItsMeshOnly(t *testing.T) {
	h := startTLSHub(t)
	h.create(t)
	spoke := func(mesh string) *stream {
		t.Helper()
		cert, _, err := h.enroll(t, h.token(t, mesh, "c1"))
		if err != nil {
			t.Fatalf("enroll into mesh %s: %v", mesh, err)
		}
		if _, err := h.push(t, cert); err != nil {
			t.Fatalf("push of mesh %s: %v", mesh, err)
		}
		return h.watch(t, cert)
	}
	acme, def := spoke("acme"), spoke("default")
	// Each holds its mesh's MeshConfig (Istio's defaults) first.
	initial := func(s *stream, mesh string) int {
		t.Helper()
		var n int
		testwait.For(t, testwait.Timeout, func() error {
			n = len(s.received())
			if names, _ := meshConfigs(t, s, 0); !slices.Equal(names, []string{mesh}) {
				return fmt.Errorf("the spoke of mesh %s holds the MeshConfigs of %v; want its mesh's", mesh, names)
			}
			return nil
		})
		return n
	}
	acmeSeen, defSeen := initial(acme, "acme"), initial(def, "default")

	update := func(mesh, td string) {
		t.Helper()
		doc := fmt.Sprintf("apiVersion: nave.io/v1alpha1\nkind: Mesh\nmetadata: {name: %s}\n"+
			"spec: {trustDomain: %s, meshConfig: {outboundTrafficPolicy: {mode: REGISTRY_ONLY}}}\n", mesh, td)
		if _, err := h.svc.Update(t.Context(), mesh, []byte(doc)); err != nil {
			t.Fatal(err)
		}
	}
	changed := func(s *stream, mesh string, skip int) {
		t.Helper()
		testwait.For(t, testwait.Timeout, func() error {
			names, configs := meshConfigs(t, s, skip)
			if len(names) == 0 {
				return fmt.Errorf("the spoke of mesh %s was sent no MeshConfig since the change", mesh)
			}
			if names[0] != mesh || configs[0].GetOutboundTrafficPolicy().GetMode() != meshv1alpha1.MeshConfig_OutboundTrafficPolicy_REGISTRY_ONLY {
				t.Fatalf("the spoke of mesh %s was sent mesh %s's MeshConfig %v; want its mesh's, REGISTRY_ONLY", mesh, names[0], configs[0])
			}
			return nil
		})
	}
	update("acme", "acme.example")
	changed(acme, "acme", acmeSeen)
	update("default", "cluster.local")
	changed(def, "default", defSeen)
	if names, _ := meshConfigs(t, def, defSeen); len(names) != 1 {
		t.Errorf("the spoke of mesh default was sent the MeshConfigs of %v since acme's change; want default's only", names)
	}
}

// TestMeshNetworksReachTheEngineAndWatch: meshNetworks given in the mesh
// document at runtime (navectl mesh update) reach the engine's snapshots
// of the mesh and its spoke on Watch, as protocol.MeshNetworksTypeURL.
func TestMeshNetworksReachTheEngineAndWatch(t *testing.T) {
	h := startTLSHub(t)
	h.create(t)
	cert, _, err := h.enroll(t, h.token(t, "acme", "c1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.push(t, cert); err != nil {
		t.Fatal(err)
	}
	w := h.watch(t, cert)
	doc := "apiVersion: nave.io/v1alpha1\nkind: Mesh\nmetadata: {name: acme}\n" +
		"spec: {trustDomain: acme.example, meshNetworks: {networks: {net2: {gateways: [{address: 192.0.2.9, port: 15443}]}}}}\n"
	if _, err := h.svc.Update(t.Context(), "acme", []byte(doc)); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, testwait.Timeout, func() error {
		st, _ := h.eng.Publisher().Current("acme")
		if st == nil {
			return fmt.Errorf("no snapshot of mesh acme yet")
		}
		if gw := st.Snapshot.MeshNetworks.GetNetworks()["net2"].GetGateways(); len(gw) != 1 || gw[0].GetAddress() != "192.0.2.9" {
			return fmt.Errorf("the snapshot's networks are %v", st.Snapshot.MeshNetworks)
		}
		return nil
	})
	testwait.For(t, testwait.Timeout, func() error {
		for _, r := range w.received() {
			if r.GetTypeUrl() != protocol.MeshNetworksTypeURL {
				continue
			}
			for _, res := range r.GetResources() {
				nw, err := protocol.DecodeMeshNetworks("acme", res)
				if err != nil {
					t.Fatal(err)
				}
				if nw.GetNetworks()["net2"].GetGateways()[0].GetPort() == 15443 {
					return nil
				}
			}
		}
		return fmt.Errorf("the spoke was sent no MeshNetworks")
	})
}
