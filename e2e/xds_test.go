package e2e

// Harness: gRPC and xDS clients of a hub: an ADS client, the delta
// watcher that records removals (checkNoRemovals), TLS dialling and the
// requests tests make by hand.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/typeurl"
)

// adsClient is a state-of-the-world ADS stream that behaves like Envoy:
// it subscribes per type and ACKs what it receives.
type adsClient struct {
	node   *corev3.Node
	subs   map[string][]string
	stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	// received counts the responses next has read.
	received atomic.Int64
}

func dialADS(t *testing.T, h *hub, nodeID string) *adsClient {
	t.Helper()
	conn, err := grpc.NewClient(addr(h.xds), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	md, _ := structpb.NewStruct(map[string]any{"MESH": "default", "NAMESPACE": "shop", "LABELS": map[string]any{"app": "web"}})
	return adsOn(t, conn, &corev3.Node{Id: nodeID, Metadata: md})
}

// adsOn opens an ADS stream of node on conn, which it closes when the
// test ends.
func adsOn(t *testing.T, conn *grpc.ClientConn, node *corev3.Node) *adsClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); conn.Close() })
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &adsClient{node: node, subs: map[string][]string{}, stream: stream}
}

// fetch subscribes to typeURL (names empty: wildcard), waits for the
// response, ACKs it and returns its resources by name.
func (c *adsClient) fetch(t *testing.T, typeURL string, names ...string) map[string]proto.Message {
	t.Helper()
	if err := c.stream.Send(&discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: typeURL, ResourceNames: names}); err != nil {
		t.Fatal(err)
	}
	c.subs[typeURL] = names
	return c.next(t, typeURL, 20*time.Second)
}

// next waits up to d for the next response of typeURL, ACKing what else
// arrives as Envoy does, and ACKs it and returns its resources by name.
func (c *adsClient) next(t *testing.T, typeURL string, d time.Duration) map[string]proto.Message {
	t.Helper()
	var resp *discoveryv3.DiscoveryResponse
	deadline := time.After(d)
	for resp == nil {
		type result struct {
			r   *discoveryv3.DiscoveryResponse
			err error
		}
		ch := make(chan result, 1)
		go func() { r, err := c.stream.Recv(); ch <- result{r, err} }()
		select {
		case res := <-ch:
			if res.err != nil {
				t.Fatal(res.err)
			}
			c.received.Add(1)
			if res.r.GetTypeUrl() == typeURL {
				resp = res.r
			} else {
				// An update of a type subscribed earlier: ACK it, as Envoy does.
				c.ack(t, res.r)
			}
		case <-deadline:
			t.Fatalf("no %s response in %s", typeURL, d)
		}
	}
	out := map[string]proto.Message{}
	for _, a := range resp.GetResources() {
		m, err := a.UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := m.(interface{ ValidateAll() error }); ok {
			if err := v.ValidateAll(); err != nil {
				t.Errorf("%s does not validate: %v", a.GetTypeUrl(), err)
			}
		}
		out[resourceName(m)] = m
	}
	c.ack(t, resp)
	return out
}

func (c *adsClient) ack(t *testing.T, resp *discoveryv3.DiscoveryResponse) {
	t.Helper()
	if err := c.stream.Send(&discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: resp.GetTypeUrl(), ResourceNames: c.subs[resp.GetTypeUrl()],
		VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
		t.Fatal(err)
	}
}

// quiet fails if a response arrives within d.
func (c *adsClient) quiet(t *testing.T, d time.Duration, why string) {
	t.Helper()
	ch := make(chan *discoveryv3.DiscoveryResponse, 1)
	go func() {
		if r, err := c.stream.Recv(); err == nil {
			ch <- r
		}
	}()
	select {
	case r := <-ch:
		t.Errorf("%s: the proxy received a %s response (%d resources)", why, r.GetTypeUrl(), len(r.GetResources()))
	case <-time.After(d):
	}
}

func resourceName(m proto.Message) string {
	if n, ok := m.(interface{ GetName() string }); ok {
		return n.GetName()
	}
	if n, ok := m.(interface{ GetClusterName() string }); ok {
		return n.GetClusterName()
	}
	return ""
}

// recvType reads the stream until a response of typeURL, ACKing what else
// arrives as Envoy does.
func (c *adsClient) recvType(t *testing.T, typeURL string) *discoveryv3.DiscoveryResponse {
	t.Helper()
	for {
		r, err := c.stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if r.GetTypeUrl() == typeURL {
			return r
		}
		c.ack(t, r)
	}
}

// watcher is a proxyless delta ADS client of the hub's clusters that
// reconnects whenever its stream ends, telling the hub what it holds
// (initial_resource_versions), and records every removal it is sent.
type watcher struct {
	// meta is the node's metadata (nil: none); set before it runs.
	meta     map[string]string
	mu       sync.Mutex
	held     map[string]string // cluster name -> version
	removals []string
	streams  int // streams that got a first response
	// answered is when the latest stream got its first response.
	answered time.Time
}

func (w *watcher) run(ctx context.Context, dial func() *grpc.ClientConn) {
	for ctx.Err() == nil {
		w.stream(ctx, dial())
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (w *watcher) stream(ctx context.Context, conn *grpc.ClientConn) {
	defer conn.Close()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		return
	}
	w.mu.Lock()
	req := &discoveryv3.DeltaDiscoveryRequest{Node: grpcNode("watcher", w.meta), TypeUrl: typeurl.Cluster,
		ResourceNamesSubscribe: []string{"*"}, InitialResourceVersions: map[string]string{}}
	for n, v := range w.held {
		req.InitialResourceVersions[n] = v
	}
	w.mu.Unlock()
	if stream.Send(req) != nil {
		return
	}
	first := true
	for {
		resp, err := stream.Recv()
		if err != nil {
			return
		}
		w.mu.Lock()
		if first {
			w.streams++
			w.answered = time.Now()
			first = false
		}
		for _, r := range resp.GetResources() {
			w.held[r.GetName()] = r.GetVersion()
		}
		for _, n := range resp.GetRemovedResources() {
			delete(w.held, n)
			w.removals = append(w.removals, n)
		}
		w.mu.Unlock()
		if stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeurl.Cluster, ResponseNonce: resp.GetNonce()}) != nil {
			return
		}
	}
}

// startWatchers runs a watcher per dial, each reconnecting through its
// dial until the test ends.
func startWatchers(t *testing.T, dials ...func() *grpc.ClientConn) []*watcher {
	return startWatchersWith(t, nil, dials...)
}

// startWatchersWith is startWatchers with meta as each node's metadata.
func startWatchersWith(t *testing.T, meta map[string]string, dials ...func() *grpc.ClientConn) []*watcher {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	ws := make([]*watcher, len(dials))
	for i, dial := range dials {
		w := &watcher{held: map[string]string{}, meta: meta}
		ws[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(ctx, dial)
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	return ws
}

// markers numbers the marker services of checkNoRemovals.
var markers atomic.Int64

// checkNoRemovals proves that no watcher received a removal, by a later
// event rather than a wait (internal/testwait): add puts a marker service
// named name, of host, into a spoke's config, and once every watcher holds
// the marker's cluster, a removal sent before it has arrived. It then
// fails for every watcher that received one; name(i) names watcher i's
// client.
func checkNoRemovals(t *testing.T, ws []*watcher, name func(i int) string, add func(name, host string)) {
	t.Helper()
	marker := fmt.Sprintf("marker-%d", markers.Add(1))
	host := marker + ".demo.svc.cluster.local"
	add(marker, host)
	for i, w := range ws {
		testwait.For(t, 60*time.Second, func() error {
			if err := w.holds(host); err != nil {
				return fmt.Errorf("%s: %v", name(i), err)
			}
			return nil
		})
	}
	for i, w := range ws {
		w.mu.Lock()
		if len(w.removals) > 0 {
			t.Errorf("%s received removals no spoke made: %v", name(i), w.removals)
		}
		w.mu.Unlock()
	}
}

// holds reports whether the watcher holds a cluster of every host.
func (w *watcher) holds(hosts ...string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, h := range hosts {
		if !slices.ContainsFunc(mapKeys(w.held), func(n string) bool { return strings.HasSuffix(n, "||"+h) }) {
			return fmt.Errorf("no cluster of %s among %v", h, mapKeys(w.held))
		}
	}
	return nil
}

func mapKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// dialTLS connects to addr over TLS verifying the hub, presenting cert if
// not nil.
func dialTLS(t *testing.T, target string, roots *x509.CertPool, cert *tls.Certificate) *grpc.ClientConn {
	t.Helper()
	c := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	if cert != nil {
		c.Certificates = []tls.Certificate{*cert}
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(credentials.NewTLS(c)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// pushClaiming opens a Sync.Push stream on conn whose metadata claims
// (mesh, cluster), sends an empty VirtualService message (no synced marker:
// nothing is pruned) and returns the hub's answer, or the error the stream
// ended with.
func pushClaiming(t *testing.T, conn *grpc.ClientConn, mesh, cluster string) (*discoveryv3.DeltaDiscoveryRequest, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	ctx = metadata.AppendToOutgoingContext(ctx, protocol.MetadataMesh, mesh, protocol.MetadataCluster, cluster)
	stream, err := protocolv1.NewSyncClient(conn).Push(ctx)
	if err != nil {
		return nil, err
	}
	vs, err := meshconfig.KindFor("networking.istio.io/v1", "VirtualService")
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: vs.TypeURL, Nonce: "1"}); err != nil {
		_, rerr := stream.Recv()
		return nil, rerr
	}
	return stream.Recv()
}

// selfSignedClient is a client certificate claiming id from a CA nobody
// trusts.
func selfSignedClient(t *testing.T, id string) tls.Certificate {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rogue CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	u, _ := url.Parse(id)
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2), URIs: []*url.URL{u},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)},
		caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der, caDER}, PrivateKey: key}
}

// adsFirst opens an ADS stream on conn for node, asks for every cluster and
// returns the first response or the error the stream ended with.
func adsFirst(t *testing.T, conn *grpc.ClientConn, node *corev3.Node) (*discoveryv3.DiscoveryResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typeurl.Cluster}); err != nil {
		_, rerr := stream.Recv()
		return nil, rerr
	}
	return stream.Recv()
}

func grpcNode(id string, meta map[string]string) *corev3.Node {
	f := map[string]*structpb.Value{}
	for k, v := range meta {
		f[k] = structpb.NewStringValue(v)
	}
	return &corev3.Node{Id: id, Metadata: &structpb.Struct{Fields: f}}
}

// wantCode fails unless err carries code and a message containing says.
func wantCode(t *testing.T, what string, err error, code codes.Code, says string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), says) {
		t.Errorf("%s: got %v; want %s saying %q", what, err, code, says)
	}
}
