package watch_test

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/hub/watch"
	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/meshconfig"
	meshconfigv1 "github.com/navemesh/nave/shared/meshconfig/v1"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
)

const waitFor = 10 * time.Second

// principalKey stands in for a spoke's certificate in these tests: the
// authenticator reads the (mesh, cluster) it proves from it, and ignores
// what the spoke claims in x-nave-mesh / x-nave-cluster.
const principalKey = "x-test-principal"

func certAuth() ingest.Authenticator {
	return ingest.AuthenticatorFunc(func(ctx context.Context) (ingest.ClusterIdentity, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		v := md.Get(principalKey)
		if len(v) != 1 {
			return ingest.ClusterIdentity{}, status.Error(codes.Unauthenticated, "no certificate")
		}
		m, c, _ := strings.Cut(v[0], "/")
		return ingest.ClusterIdentity{Mesh: m, Cluster: c}, nil
	})
}

type fixture struct {
	src  *pushctxtest.Source
	w    *watch.Server
	conn *grpc.ClientConn
}

func newFixture(t *testing.T, opts ...func(*watch.Options)) *fixture {
	t.Helper()
	f := &fixture{src: pushctxtest.NewSource()}
	o := watch.Options{Debounce: 10 * time.Millisecond,
		Roots: func(m string) (*protocolv1.TrustBundle, error) {
			return &protocolv1.TrustBundle{Mesh: m, TrustDomain: m + ".example", RootsPem: "roots of " + m}, nil
		}}
	for _, fn := range opts {
		fn(&o)
	}
	f.w = watch.New(f.src, o)
	in := ingest.NewServer(ingest.NewStore(ingest.StoreOptions{}), certAuth(), ingest.ServerOptions{Watch: func(id ingest.ClusterIdentity, s protocolv1.Sync_WatchServer) error {
		return f.w.Serve(id.Mesh, id.Cluster, s)
	}})
	srv := grpc.NewServer()
	protocolv1.RegisterSyncServer(srv, in)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	f.conn, err = grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.conn.Close() })
	return f
}

// watcher is a raw Watch client: it records what it holds, per type URL,
// name -> version.
type watcher struct {
	t      *testing.T
	stream protocolv1.Sync_WatchClient
	held   map[string]map[string]string
	bodies map[string]*discoveryv3.Resource
}

// watch opens a stream proving principal while claiming claim, subscribes
// to every type (with held as its initial versions) and reads until the
// synced marker, ACKing everything.
func (f *fixture) watch(t *testing.T, principal, claim string, held map[string]map[string]string) *watcher {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	t.Cleanup(cancel)
	m, c, _ := strings.Cut(claim, "/")
	ctx = metadata.AppendToOutgoingContext(ctx, principalKey, principal, protocol.MetadataMesh, m, protocol.MetadataCluster, c)
	stream, err := protocolv1.NewSyncClient(f.conn).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := &watcher{t: t, stream: stream, held: map[string]map[string]string{}, bodies: map[string]*discoveryv3.Resource{}}
	for _, typeURL := range protocol.WatchTypeURLs() {
		if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeURL, InitialResourceVersions: held[typeURL]}); err != nil {
			t.Fatal(err)
		}
		w.held[typeURL] = map[string]string{}
		for n, v := range held[typeURL] {
			w.held[typeURL][n] = v
		}
	}
	if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: protocol.SyncedTypeURL}); err != nil {
		t.Fatal(err)
	}
	for {
		r := w.next()
		if r.GetTypeUrl() == protocol.SyncedTypeURL {
			return w
		}
	}
}

// next reads one response, applies and ACKs it.
func (w *watcher) next() *discoveryv3.DeltaDiscoveryResponse {
	w.t.Helper()
	r, err := w.stream.Recv()
	if err != nil {
		w.t.Fatalf("watch recv: %v", err)
	}
	w.apply(r)
	if err := w.stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()}); err != nil {
		w.t.Fatal(err)
	}
	return r
}

func (w *watcher) apply(r *discoveryv3.DeltaDiscoveryResponse) {
	if w.held[r.GetTypeUrl()] == nil {
		w.held[r.GetTypeUrl()] = map[string]string{}
	}
	for _, res := range r.GetResources() {
		w.held[r.GetTypeUrl()][res.GetName()] = res.GetVersion()
		w.bodies[r.GetTypeUrl()+" "+res.GetName()] = res
	}
	for _, n := range r.GetRemovedResources() {
		delete(w.held[r.GetTypeUrl()], n)
	}
}

func (w *watcher) names() []string {
	var out []string
	for t, byName := range w.held {
		for n := range byName {
			out = append(out, typeShort(t)+" "+n)
		}
	}
	return out
}

func typeShort(t string) string { return t[strings.LastIndex(t, ".")+1:] }

func objs(t *testing.T, y string) []*meshconfig.Object { return pushctxtest.Decode(t, y) }

const svc = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: %s, namespace: demo}
spec:
  hosts: [%s.demo.svc.cluster.local]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.1}]
`

func se(t *testing.T, name string) *meshconfig.Object {
	return objs(t, strings.ReplaceAll(svc, "%s", name))[0]
}

func TestWatchGivesOnlyTheOtherClustersOfTheAuthenticatedMesh(t *testing.T) {
	f := newFixture(t)
	f.src.Set("a",
		mesh.ClusterInput{Name: "c1", Connected: true, Synced: true, Objects: []*meshconfig.Object{se(t, "a-own")}},
		mesh.ClusterInput{Name: "c2", Connected: true, Synced: true, DomainSuffix: "c2.example", Objects: []*meshconfig.Object{se(t, "a-remote")}},
		// A cluster that never synced contributes nothing but its status.
		mesh.ClusterInput{Name: "c4", Connected: true})
	f.src.Set("b",
		mesh.ClusterInput{Name: "c1", Connected: true, Synced: true, Objects: []*meshconfig.Object{se(t, "b-secret-1")}},
		mesh.ClusterInput{Name: "c2", Connected: true, Synced: true, Objects: []*meshconfig.Object{se(t, "b-secret-2")}},
		mesh.ClusterInput{Name: "c3", Connected: true, Synced: true, Objects: []*meshconfig.Object{se(t, "b-secret-3")}})

	// The attacker holds a certificate of a/c1 and claims b/c3.
	w := f.watch(t, "a/c1", "b/c3", nil)
	got := strings.Join(sorted(w.names()), ",")
	want := "ClusterStatus c2,ClusterStatus c4,ServiceEntry c2/demo/a-remote,TrustBundle a"
	if got != want {
		t.Fatalf("held = %s\nwant %s", got, want)
	}
	for _, n := range w.names() {
		if strings.Contains(n, "b-secret") || strings.HasSuffix(n, " b") || strings.Contains(n, "c3") {
			t.Fatalf("mesh b leaked to a spoke of mesh a: %s", n)
		}
	}
	var cs protocolv1.ClusterStatus
	if err := w.bodies[protocol.ClusterStatusTypeURL+" c2"].GetResource().UnmarshalTo(&cs); err != nil {
		t.Fatal(err)
	}
	if cs.GetDomainSuffix() != "c2.example" || !cs.GetSynced() {
		t.Fatalf("status of c2 = %v", &cs)
	}
	kind, _ := meshconfig.KindByTypeURL(se(t, "x").Kind.TypeURL)
	cluster, o, err := protocol.DecodeRemote(kind, w.bodies[kind.TypeURL+" c2/demo/a-remote"])
	if err != nil || cluster != "c2" || o.Name != "a-remote" {
		t.Fatalf("DecodeRemote = %s, %v, %v", cluster, o, err)
	}

	// Changes in mesh b never reach it; a change in mesh a does.
	f.src.Set("b", mesh.ClusterInput{Name: "c2", Connected: true, Synced: true, Objects: []*meshconfig.Object{se(t, "b-secret-4")}})
	f.w.Notify("b")
	f.src.Set("a",
		mesh.ClusterInput{Name: "c1", Connected: true, Synced: true, Objects: []*meshconfig.Object{se(t, "a-own")}},
		mesh.ClusterInput{Name: "c2", Connected: true, Synced: true, DomainSuffix: "c2.example", Objects: []*meshconfig.Object{se(t, "a-remote-2")}},
		mesh.ClusterInput{Name: "c4", Connected: true})
	f.w.Notify("a")
	r := w.next()
	if typeShort(r.GetTypeUrl()) != "ServiceEntry" || len(r.GetResources()) != 1 || r.GetResources()[0].GetName() != "c2/demo/a-remote-2" ||
		len(r.GetRemovedResources()) != 1 || r.GetRemovedResources()[0] != "c2/demo/a-remote" {
		t.Fatalf("after a change in mesh a got %v", r)
	}
	// Synced is the stream's record of the spoke's ACK of the synced
	// marker, which the stream may take after the change it sent:
	// awaited.
	pushctxtest.Eventually(t, "the stream of a/c1 is synced", func() bool {
		st := f.w.Status()
		return len(st) == 1 && st[0].Mesh == "a" && st[0].Cluster == "c1" && st[0].Synced
	})
}

func TestWatchSendsOnlyWhatDiffersFromTheInitialVersions(t *testing.T) {
	f := newFixture(t)
	keep, gone := se(t, "keep"), se(t, "gone")
	f.src.Set("a",
		mesh.ClusterInput{Name: "c1", Connected: true, Synced: true},
		mesh.ClusterInput{Name: "c2", Connected: true, Synced: true, Objects: []*meshconfig.Object{keep, gone}})
	first := f.watch(t, "a/c1", "a/c1", nil)
	first.stream.CloseSend()

	// A spoke that restarts with its view on disk says what it holds; the
	// hub then sends only the difference.
	f.src.Set("a",
		mesh.ClusterInput{Name: "c1", Connected: true, Synced: true},
		mesh.ClusterInput{Name: "c2", Connected: true, Synced: true, Objects: []*meshconfig.Object{keep, se(t, "new")}})
	w := f.watch(t, "a/c1", "a/c1", first.held)
	got := strings.Join(sorted(w.names()), ",")
	if want := "ClusterStatus c2,ServiceEntry c2/demo/keep,ServiceEntry c2/demo/new,TrustBundle a"; got != want {
		t.Fatalf("held = %s\nwant %s", got, want)
	}
	if _, sent := w.bodies[keep.Kind.TypeURL+" c2/demo/keep"]; sent {
		t.Fatal("an unchanged resource the spoke holds was sent again")
	}
}

func TestWatchRecordsNACKsAndRefusesUnknownTypes(t *testing.T) {
	f := newFixture(t)
	f.src.Set("a", mesh.ClusterInput{Name: "c2", Connected: true, Synced: true})
	ctx := metadata.AppendToOutgoingContext(context.Background(), principalKey, "a/c1")
	stream, err := protocolv1.NewSyncClient(f.conn).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: protocol.TrustBundleTypeURL})
	r, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce(),
		ErrorDetail: &statuspb.Status{Code: int32(codes.InvalidArgument), Message: "trust bundle refused"}})
	pushctxtest.Eventually(t, "the NACK is recorded", func() bool {
		st := f.w.Status()
		return len(st) == 1 && st[0].Nacks == 1 && st[0].LastNack == "trust bundle refused"
	})
	stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: "type.googleapis.com/google.protobuf.Empty"})
	if _, err := stream.Recv(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "google.protobuf.Empty") {
		t.Fatalf("unknown type: err = %v, want InvalidArgument naming it", err)
	}
}

func TestWatchWithoutHandlerIsUnimplementedAndUnauthenticatedIsRefused(t *testing.T) {
	in := ingest.NewServer(ingest.NewStore(ingest.StoreOptions{}), certAuth(), ingest.ServerOptions{})
	srv := grpc.NewServer()
	protocolv1.RegisterSyncServer(srv, in)
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(lis)
	defer srv.Stop()
	conn, _ := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	s, _ := protocolv1.NewSyncClient(conn).Watch(metadata.AppendToOutgoingContext(context.Background(), principalKey, "a/c1"))
	if _, err := s.Recv(); status.Code(err) != codes.Unimplemented {
		t.Fatalf("err = %v, want Unimplemented", err)
	}
	f := newFixture(t)
	s, _ = protocolv1.NewSyncClient(f.conn).Watch(context.Background())
	if _, err := s.Recv(); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("err = %v, want Unauthenticated", err)
	}
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

func TestWatchWaitsUntilTheMeshIsReady(t *testing.T) {
	f := newFixture(t)
	var ready atomic.Bool
	f.w = watch.New(f.src, watch.Options{Debounce: time.Millisecond,
		Ready: func(string, []mesh.ClusterInput) bool { return ready.Load() }})
	f.src.Set("a", mesh.ClusterInput{Name: "c2", Connected: true, Synced: true, Objects: []*meshconfig.Object{se(t, "echo")}})
	got := make(chan *watcher, 1)
	go func() { got <- f.watch(t, "a/c1", "a/c1", nil) }()
	select {
	case <-got:
		t.Fatal("the view was sent before the mesh was ready")
	case <-time.After(200 * time.Millisecond):
	}
	ready.Store(true)
	f.w.Notify("a")
	select {
	case w := <-got:
		if names := strings.Join(sorted(w.names()), ","); names != "ClusterStatus c2,ServiceEntry c2/demo/echo" {
			t.Fatalf("held = %s", names)
		}
	case <-time.After(waitFor):
		t.Fatal("no view once the mesh was ready")
	}
}

func TestCloseEndsARevokedClustersWatch(t *testing.T) {
	f := newFixture(t)
	f.src.Set("a", mesh.ClusterInput{Name: "c2", Connected: true, Synced: true})
	w := f.watch(t, "a/c1", "a/c1", nil)
	f.watch(t, "a/c2", "a/c2", nil) // another cluster's watch stays
	if n := f.w.Close("a", "c1", "cluster revoked"); n != 1 {
		t.Fatalf("closed %d streams, want 1", n)
	}
	if _, err := w.stream.Recv(); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "cluster revoked") {
		t.Fatalf("revoked cluster's watch: err = %v, want PermissionDenied naming the reason", err)
	}
	if st := f.w.Status(); len(st) != 1 || st[0].Cluster != "c2" {
		t.Fatalf("streams left: %+v", st)
	}
}

func TestCloseMeshEndsEveryWatchOfTheMesh(t *testing.T) {
	f := newFixture(t)
	f.src.Set("a", mesh.ClusterInput{Name: "c2", Connected: true, Synced: true})
	f.src.Set("b", mesh.ClusterInput{Name: "c2", Connected: true, Synced: true})
	w1 := f.watch(t, "a/c1", "a/c1", nil)
	w2 := f.watch(t, "a/c2", "a/c2", nil)
	f.watch(t, "b/c1", "b/c1", nil) // another mesh's watch stays
	if n := f.w.CloseMesh("a", "mesh a deleted"); n != 2 {
		t.Fatalf("closed %d streams, want 2", n)
	}
	for _, w := range []*watcher{w1, w2} {
		if _, err := w.stream.Recv(); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "mesh a deleted") {
			t.Fatalf("deleted mesh's watch: err = %v, want PermissionDenied naming the reason", err)
		}
	}
	if st := f.w.Status(); len(st) != 1 || st[0].Mesh != "b" {
		t.Fatalf("streams left: %+v", st)
	}
}

func TestWatchOfAMeshNotHostedEndsAtOnce(t *testing.T) {
	f := newFixture(t, func(o *watch.Options) { o.Hosted = func(m string) bool { return m != "gone" } })
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, principalKey, "gone/c1", protocol.MetadataMesh, "gone", protocol.MetadataCluster, "c1")
	stream, err := protocolv1.NewSyncClient(f.conn).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `"gone"`) {
		t.Fatalf("watch of a deleted mesh: %v; want PermissionDenied naming it", err)
	}
	if st := f.w.Status(); len(st) != 0 {
		t.Errorf("streams left: %+v", st)
	}
	f.watch(t, "a/c1", "a/c1", nil) // another mesh is served
}

func TestWatchSendsTheMeshConfigAndItsChanges(t *testing.T) {
	f := newFixture(t)
	var mu sync.Mutex
	configs := map[string]*meshv1alpha1.MeshConfig{
		"a": {RootNamespace: "mesh-a-root"},
		"b": {RootNamespace: "mesh-b-secret"},
	}
	f.w = watch.New(f.src, watch.Options{Debounce: time.Millisecond, MeshConfig: func(m string) *meshv1alpha1.MeshConfig {
		mu.Lock()
		defer mu.Unlock()
		return configs[m]
	}})
	f.src.Set("a", mesh.ClusterInput{Name: "c2", Connected: true, Synced: true})
	w := f.watch(t, "a/c1", "a/c1", nil)
	meshConfig := func() *meshv1alpha1.MeshConfig {
		t.Helper()
		res := w.bodies[protocol.MeshConfigTypeURL+" a"]
		cfg, err := protocol.DecodeMeshConfig("a", res)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	if got := meshConfig().GetRootNamespace(); got != "mesh-a-root" {
		t.Fatalf("initial mesh config root namespace %q, want mesh-a-root", got)
	}
	if names := strings.Join(sorted(w.names()), ","); names != "ClusterStatus c2,MeshConfig a" {
		t.Fatalf("held = %s", names)
	}

	// Another mesh's change reaches no stream of mesh a: the next response
	// is mesh a's own change.
	mu.Lock()
	configs["b"] = &meshv1alpha1.MeshConfig{RootNamespace: "mesh-b-changed"}
	mu.Unlock()
	f.w.MeshConfigChanged("b")
	mu.Lock()
	configs["a"] = &meshv1alpha1.MeshConfig{RootNamespace: "mesh-a-changed", EnableAutoMtls: wrapperspb.Bool(false)}
	mu.Unlock()
	f.w.MeshConfigChanged("a")
	r := w.next()
	if r.GetTypeUrl() != protocol.MeshConfigTypeURL || len(r.GetResources()) != 1 || r.GetResources()[0].GetName() != "a" {
		t.Fatalf("after a MeshConfig change of mesh a got %v", r)
	}
	if got := meshConfig(); got.GetRootNamespace() != "mesh-a-changed" || got.GetEnableAutoMtls().GetValue() {
		t.Fatalf("changed mesh config = %v", got)
	}

	// A mesh config taken away is removed: the spoke goes back to Istio's
	// defaults.
	mu.Lock()
	delete(configs, "a")
	mu.Unlock()
	f.w.MeshConfigChanged("a")
	r = w.next()
	if r.GetTypeUrl() != protocol.MeshConfigTypeURL || len(r.GetRemovedResources()) != 1 || r.GetRemovedResources()[0] != "a" {
		t.Fatalf("after the mesh config was taken away got %v", r)
	}
}

// A spoke is served the hub's statuses of its own cluster's Gateway API
// objects only, named Kind/namespace/name, and a change after Notify.
func TestWatchSendsTheClustersOwnGatewayAPIStatuses(t *testing.T) {
	var mu sync.Mutex
	statuses := map[string][]*meshconfigv1.GatewayAPIStatus{
		"a/c1": {{Kind: "HTTPRoute", Namespace: "ns", Name: "web", Version: "v1", Json: []byte(`{"parents":[]}`)}},
		"a/c2": {{Kind: "HTTPRoute", Namespace: "ns", Name: "theirs", Version: "v1", Json: []byte(`{"parents":[]}`)}},
	}
	f := newFixture(t, func(o *watch.Options) {
		o.GatewayAPIStatus = func(m, c string) []*meshconfigv1.GatewayAPIStatus {
			mu.Lock()
			defer mu.Unlock()
			return statuses[m+"/"+c]
		}
	})
	f.src.Set("a", mesh.ClusterInput{Name: "c2", Connected: true, Synced: true})
	w := f.watch(t, "a/c1", "a/c1", nil)
	if got := w.held[protocol.GatewayAPIStatusTypeURL]; len(got) != 1 || got["HTTPRoute/ns/web"] == "" {
		t.Fatalf("statuses held %v: want this cluster's HTTPRoute/ns/web alone", got)
	}
	if _, err := protocol.DecodeGatewayAPIStatus(w.bodies[protocol.GatewayAPIStatusTypeURL+" HTTPRoute/ns/web"]); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	statuses["a/c1"] = []*meshconfigv1.GatewayAPIStatus{{Kind: "HTTPRoute", Namespace: "ns", Name: "web", Version: "v2", Json: []byte(`{"parents":[{}]}`)}}
	mu.Unlock()
	f.w.Notify("a")
	r := w.next()
	if r.GetTypeUrl() != protocol.GatewayAPIStatusTypeURL || len(r.GetResources()) != 1 || r.GetResources()[0].GetName() != "HTTPRoute/ns/web" {
		t.Fatalf("after a status change got %v", r)
	}
}
