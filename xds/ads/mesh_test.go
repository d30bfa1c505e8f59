package ads_test

import (
	"context"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/typeurl"
)

const otherYAML = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: other, namespace: shop}
spec:
  hosts: [other.shop.svc.cluster.local]
  ports: [{number: 8080, name: grpc, protocol: GRPC}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.1}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: other, namespace: shop}
spec: {host: other.shop.svc.cluster.local}
`

func TestProxyGetsOnlyItsMesh(t *testing.T) {
	f := newFixture(t, nil)
	f.set(t, "m", synced("c1", decode(t, echoYAML(80, 20, "ROUND_ROBIN"))))
	f.set(t, "m2", synced("c1", decode(t, otherYAML)))

	for _, tc := range []struct {
		name, node, mesh string
		want             []string
	}{
		{"mesh m2", "proxy-1", "m2", []string{"outbound|8080||other.shop.svc.cluster.local"}},
		{"mesh m", "proxy-2", "m", []string{echoV1, echoV2, echoCluster}},
		{"default mesh", "proxy-3", "", []string{echoV1, echoV2, echoCluster}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := f.connect(t, node(tc.node, tc.mesh))
			p.subscribe(typeurl.Cluster)
			if got := names(t, p.next(typeurl.Cluster)); !slices.Equal(got, tc.want) {
				t.Errorf("clusters = %v, want %v", got, tc.want)
			}
		})
	}

	// A mesh nobody pushed is never ready: its proxies get no answer.
	p := f.connect(t, node("proxy-4", "m3"))
	p.subscribe(typeurl.Cluster)
	p.quiet(quietFor, "mesh m3 has no cluster")
}

func TestMeshIsAnsweredOnlyOnceAClusterSynced(t *testing.T) {
	var f *fixture
	in := ingest.New(ingest.ClaimedIdentity(), ingest.Options{
		StaleGracePeriod: time.Hour,
		OnChange:         func(meshName string) { f.pc.Notify(meshName) },
	})
	f = newFixture(t, in)
	spokes := serve(t, func(s *grpc.Server) { protocolv1.RegisterSyncServer(s, in) })
	objs := decode(t, echoYAML(80, 20, "ROUND_ROBIN"))

	p := f.connect(t, node("proxy-1", "m"))
	p.subscribe(typeurl.Listener, echoListener)
	p.quiet(quietFor, "mesh m has no cluster")

	s := connectSpoke(t, spokes, "m", "c1")
	s.sendState(objs)
	p.quiet(quietFor, "the only cluster has not synced")
	s.synced()
	lds := p.next(typeurl.Listener)
	if got := names(t, lds); !slices.Equal(got, []string{echoListener}) {
		t.Fatalf("listeners = %v, want %s", got, echoListener)
	}
	p.ack(lds, echoListener)
	for _, typeURL := range []string{typeurl.Cluster, typeurl.Endpoint, typeurl.Route} {
		p.subscribe(typeURL)
		p.ack(p.next(typeURL))
	}

	// The spoke reconnects with unchanged state: the mesh is rebuilt, and
	// nothing is pushed (DESIGN.md invariant 4).
	before, _ := f.pc.Current("m")
	s.close()
	s2 := connectSpoke(t, spokes, "m", "c1")
	s2.sendState(decode(t, echoYAML(80, 20, "ROUND_ROBIN")))
	s2.synced()
	deadline := time.Now().Add(waitFor)
	for {
		st, _ := f.pc.Current("m")
		if st.Version > before.Version && len(st.Snapshot.Clusters) == 1 && st.Snapshot.Clusters[0].Synced && st.Snapshot.Clusters[0].Connected {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the reconnected cluster was not published")
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.quiet(quietFor, "an unchanged reconnect")
}

// spokeStream is a Push stream, sent to as a spoke would.
type spokeStream struct {
	t       *testing.T
	stream  protocolv1.Sync_PushClient
	cancel  context.CancelFunc
	replies chan *discoveryv3.DeltaDiscoveryRequest
	done    chan struct{}
	nonce   int
}

func connectSpoke(t *testing.T, addr, meshName, cluster string) *spokeStream {
	t.Helper()
	md := metadata.Pairs(protocol.MetadataMesh, meshName, protocol.MetadataCluster, cluster, protocol.MetadataProtocol, protocol.Version)
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(context.Background(), md))
	stream, err := protocolv1.NewSyncClient(dial(t, addr)).Push(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &spokeStream{t: t, stream: stream, cancel: cancel, replies: make(chan *discoveryv3.DeltaDiscoveryRequest, 16), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			r, err := stream.Recv()
			if err != nil {
				return
			}
			select {
			case s.replies <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *spokeStream) close() {
	s.cancel()
	<-s.done
}

// send pushes one message and waits for its ACK.
func (s *spokeStream) send(typeURL string, objs []*meshconfig.Object) {
	s.t.Helper()
	s.nonce++
	msg := &discoveryv3.DeltaDiscoveryResponse{TypeUrl: typeURL, Nonce: strconv.Itoa(s.nonce), SystemVersionInfo: protocol.Version}
	for _, o := range objs {
		r, err := protocol.Encode(o)
		if err != nil {
			s.t.Fatal(err)
		}
		msg.Resources = append(msg.Resources, r)
	}
	if err := s.stream.Send(msg); err != nil {
		s.t.Fatal(err)
	}
	select {
	case r := <-s.replies:
		if r.GetResponseNonce() != msg.Nonce || r.GetErrorDetail() != nil {
			s.t.Fatalf("hub answered nonce %s with %v", msg.Nonce, r)
		}
	case <-s.done:
		s.t.Fatal("push stream ended")
	case <-time.After(waitFor):
		s.t.Fatalf("no answer to nonce %s", msg.Nonce)
	}
}

// sendState sends objs, one message per type in lexical order of type URL.
func (s *spokeStream) sendState(objs []*meshconfig.Object) {
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
		s.send(typeURL, byType[typeURL])
	}
}

func (s *spokeStream) synced() {
	s.t.Helper()
	s.send(protocol.SyncedTypeURL, nil)
}
