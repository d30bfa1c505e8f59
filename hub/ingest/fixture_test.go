package ingest_test

import (
	"context"
	"net"
	"sort"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/internal/metrictest"
	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/mesh"
)

// waitFor bounds every wait of these tests; it is generous because the
// race detector on a busy two-core machine is slow, and a passing test
// never waits for it.
const waitFor = 10 * time.Second

// fullState is what a spoke of the demo mesh holds: two VirtualServices,
// a DestinationRule, a ServiceEntry and a WorkloadEntry.
const fullState = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: demo}
spec:
  hosts: [echo.demo.svc.cluster.local]
  http:
  - route:
    - {destination: {host: echo.demo.svc.cluster.local, subset: v1}, weight: 80}
    - {destination: {host: echo.demo.svc.cluster.local, subset: v2}, weight: 20}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo-beta, namespace: demo}
spec:
  hosts: [echo-beta.demo.svc.cluster.local]
  http:
  - route:
    - destination: {host: echo.demo.svc.cluster.local, subset: v2}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: demo}
spec:
  host: echo.demo.svc.cluster.local
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: demo}
spec:
  hosts: [echo.demo.svc.cluster.local]
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  workloadSelector: {labels: {app: echo}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: echo-v1, namespace: demo}
spec:
  address: 127.0.0.1
  ports: {grpc: 17071}
  labels: {app: echo, version: v1}
`

// fixture is an ingest.Store and its Server behind a real gRPC server on
// loopback.
type fixture struct {
	store   *ingest.Store
	srv     *ingest.Server
	own     *ingest.Ownership
	client  protocolv1.SyncClient
	changes atomic.Int64 // OnChange calls
	// endpointChanges counts OnEndpointChange calls.
	endpointChanges atomic.Int64
	reg             *prometheus.Registry
}

// metric sums the values of the ingest metric name.
func (f *fixture) metric(t *testing.T, name string) float64 {
	t.Helper()
	return metrictest.Value(t, f.reg, name)
}

func newFixture(t *testing.T, grace time.Duration) *fixture {
	t.Helper()
	return newFixtureAuth(t, grace, ingest.ClaimedIdentity())
}

// newFixtureAuth is newFixture with a Server that authenticates with auth
// (and whose options opts change).
func newFixtureAuth(t *testing.T, grace time.Duration, auth ingest.Authenticator, opts ...func(*ingest.ServerOptions)) *fixture {
	t.Helper()
	return newFixtureOpts(t, grace, auth, func(_ *ingest.StoreOptions, so *ingest.ServerOptions) {
		for _, o := range opts {
			o(so)
		}
	})
}

// newFixtureOpts is newFixtureAuth whose opts change the Store's options
// too.
func newFixtureOpts(t *testing.T, grace time.Duration, auth ingest.Authenticator, opts ...func(*ingest.StoreOptions, *ingest.ServerOptions)) *fixture {
	t.Helper()
	f := &fixture{reg: prometheus.NewRegistry()}
	so := ingest.StoreOptions{
		Registerer:       f.reg,
		StaleGracePeriod: grace,
		OnChange: func(_ string, endpointsOnly bool) {
			if endpointsOnly {
				f.endpointChanges.Add(1)
			} else {
				f.changes.Add(1)
			}
		},
	}
	vo := ingest.ServerOptions{Registerer: f.reg}
	for _, o := range opts {
		o(&so, &vo)
	}
	f.store = ingest.NewStore(so)
	f.srv = ingest.NewServer(f.store, auth, vo)
	f.own = ingest.NewOwnership(f.srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	protocolv1.RegisterSyncServer(gs, f.srv)
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	t.Cleanup(func() {
		gs.Stop()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	f.client = protocolv1.NewSyncClient(conn)
	return f
}

// spoke is one Push stream, driven by the test as a spoke would drive it.
type spoke struct {
	t       *testing.T
	stream  protocolv1.Sync_PushClient
	cancel  context.CancelFunc
	replies chan *discoveryv3.DeltaDiscoveryRequest
	done    chan struct{} // closed when the stream ended; err is set then
	err     error
	nonce   int
}

// dial opens a stream that claims (meshName, cluster).
func (f *fixture) dial(t *testing.T, meshName, cluster string) *spoke {
	t.Helper()
	return f.open(t, metadata.Pairs(protocol.MetadataMesh, meshName, protocol.MetadataCluster, cluster,
		protocol.MetadataProtocol, protocol.Version))
}

// open opens a stream with the given metadata; a reader goroutine collects
// the hub's replies until the stream ends or the test is cleaned up.
func (f *fixture) open(t *testing.T, md metadata.MD) *spoke {
	t.Helper()
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(context.Background(), md))
	stream, err := f.client.Push(ctx)
	if err != nil {
		cancel()
		t.Fatalf("open push stream: %v", err)
	}
	s := &spoke{t: t, stream: stream, cancel: cancel,
		replies: make(chan *discoveryv3.DeltaDiscoveryRequest, 64), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			r, err := stream.Recv()
			if err != nil {
				s.err = err
				return
			}
			select {
			case s.replies <- r:
			case <-ctx.Done():
				s.err = ctx.Err()
				return
			}
		}
	}()
	t.Cleanup(s.close)
	return s
}

// close ends the stream from the spoke's side and waits for its reader.
func (s *spoke) close() {
	s.cancel()
	<-s.done
}

// send pushes one message of typeURL; it returns the message's nonce.
func (s *spoke) send(typeURL string, objs []*meshconfig.Object, removed ...string) string {
	s.t.Helper()
	msg := &discoveryv3.DeltaDiscoveryResponse{TypeUrl: typeURL, RemovedResources: removed}
	for _, o := range objs {
		r, err := protocol.Encode(o)
		if err != nil {
			s.t.Fatal(err)
		}
		msg.Resources = append(msg.Resources, r)
	}
	return s.sendMsg(msg)
}

// sendMsg numbers msg and sends it.
func (s *spoke) sendMsg(msg *discoveryv3.DeltaDiscoveryResponse) string {
	s.t.Helper()
	s.nonce++
	msg.Nonce = strconv.Itoa(s.nonce)
	msg.SystemVersionInfo = protocol.Version
	s.sendRaw(msg)
	return msg.Nonce
}

// sendRaw sends msg as it is.
func (s *spoke) sendRaw(msg *discoveryv3.DeltaDiscoveryResponse) {
	s.t.Helper()
	if err := s.stream.Send(msg); err != nil {
		s.t.Fatalf("send nonce %q: %v", msg.Nonce, err)
	}
}

// reply returns the hub's next answer.
func (s *spoke) reply() *discoveryv3.DeltaDiscoveryRequest {
	s.t.Helper()
	select {
	case r := <-s.replies:
		return r
	case <-s.done:
		s.t.Fatalf("stream ended while waiting for a reply: %v", s.err)
	case <-time.After(waitFor):
		s.t.Fatal("no reply from the hub")
	}
	return nil
}

// acked waits for the answer to nonce and fails unless it is an ACK.
func (s *spoke) acked(nonce string) {
	s.t.Helper()
	r := s.reply()
	if r.GetResponseNonce() != nonce {
		s.t.Fatalf("reply answers nonce %q, want %q", r.GetResponseNonce(), nonce)
	}
	if r.GetErrorDetail() != nil {
		s.t.Fatalf("nonce %s NACKed: %v", nonce, r.GetErrorDetail().GetMessage())
	}
}

// nacked waits for the answer to nonce and fails unless it is a NACK.
func (s *spoke) nacked(nonce string) *discoveryv3.DeltaDiscoveryRequest {
	s.t.Helper()
	r := s.reply()
	if r.GetResponseNonce() != nonce {
		s.t.Fatalf("reply answers nonce %q, want %q", r.GetResponseNonce(), nonce)
	}
	if r.GetErrorDetail() == nil {
		s.t.Fatalf("nonce %s ACKed, want a NACK", nonce)
	}
	return r
}

// sendState sends objs as a full state, one message per type in lexical
// order of type URL, and checks that every message is ACKed. It does not
// send the synced marker.
func (s *spoke) sendState(objs []*meshconfig.Object) {
	s.t.Helper()
	byType := map[string][]*meshconfig.Object{}
	for _, o := range objs {
		byType[o.Kind.TypeURL] = append(byType[o.Kind.TypeURL], o)
	}
	types := make([]string, 0, len(byType))
	for typeURL := range byType {
		types = append(types, typeURL)
	}
	sort.Strings(types)
	for _, typeURL := range types {
		s.acked(s.send(typeURL, byType[typeURL]))
	}
}

// synced sends the synced marker and checks that it is ACKed.
func (s *spoke) synced() {
	s.t.Helper()
	s.acked(s.send(protocol.SyncedTypeURL, nil))
}

// sync sends objs as the full state, then the synced marker.
func (s *spoke) sync(objs []*meshconfig.Object) {
	s.t.Helper()
	s.sendState(objs)
	s.synced()
}

// ended waits for the stream to end and returns its error.
func (s *spoke) ended() error {
	s.t.Helper()
	select {
	case <-s.done:
		if status.Code(s.err) == codes.Canceled {
			s.t.Fatal("stream was ended by the test, not the hub")
		}
		return s.err
	case <-time.After(waitFor):
		s.t.Fatal("stream did not end")
	}
	return nil
}

// decode decodes YAML config that must be valid.
func decode(t *testing.T, y string) []*meshconfig.Object {
	t.Helper()
	objs, errs := meshconfig.DecodeYAML([]byte(y), "test.yaml")
	for _, err := range errs {
		t.Errorf("decode: %v", err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	return objs
}

// pick returns the objects of objs with the given "Kind namespace/name" refs.
func pick(t *testing.T, objs []*meshconfig.Object, refs ...string) []*meshconfig.Object {
	t.Helper()
	var out []*meshconfig.Object
	for _, ref := range refs {
		found := false
		for _, o := range objs {
			if ref == o.Kind.Kind+" "+o.Key() {
				out = append(out, o)
				found = true
			}
		}
		if !found {
			t.Fatalf("no object %s", ref)
		}
	}
	return out
}

// cluster returns cluster's input as the hub holds it, and whether it has one.
func (f *fixture) cluster(meshName, cluster string) (mesh.ClusterInput, bool) {
	for _, c := range f.store.Clusters(meshName) {
		if c.Name == cluster {
			return c, true
		}
	}
	return mesh.ClusterInput{}, false
}

// objects returns the hub's objects of a cluster by "Kind namespace/name".
func (f *fixture) objects(meshName, cluster string) map[string]*meshconfig.Object {
	c, _ := f.cluster(meshName, cluster)
	out := map[string]*meshconfig.Object{}
	for _, o := range c.Objects {
		out[o.Kind.Kind+" "+o.Key()] = o
	}
	return out
}

// status returns the hub's status of a cluster, and whether it has one.
func (f *fixture) status(meshName, cluster string) (ingest.ClusterStatus, bool) {
	for _, s := range f.store.Status() {
		if s.Mesh == meshName && s.Cluster == cluster {
			return s, true
		}
	}
	return ingest.ClusterStatus{}, false
}

// versions maps "Kind namespace/name" to the version of each object.
func versions(objs []*meshconfig.Object) map[string]string {
	out := map[string]string{}
	for _, o := range objs {
		out[o.Kind.Kind+" "+o.Key()] = o.Version
	}
	return out
}

func refs(objs map[string]*meshconfig.Object) []string {
	out := make([]string, 0, len(objs))
	for r := range objs {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}
