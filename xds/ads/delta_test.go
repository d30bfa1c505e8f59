package ads_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/ads/adstest"
	"github.com/navemesh/nave/xds/gen/envoy"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
)

// deltaProxy is a raw incremental ADS client driven by the test. It keeps
// the resources it holds, as a proxy does, applying each response.
type deltaProxy struct {
	t      *testing.T
	stream discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	node   *corev3.Node
	sent   bool
	resps  chan *discoveryv3.DeltaDiscoveryResponse
	done   chan struct{}
	err    error
	held   map[string]map[string][]byte // type → name → resource bytes
}

func (f *fixture) connectDelta(t *testing.T, n *corev3.Node, opts ...grpc.DialOption) *deltaProxy {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(dial(t, f.addr, opts...)).DeltaAggregatedResources(ctx)
	if err != nil {
		cancel()
		t.Fatalf("open delta ADS stream: %v", err)
	}
	p := &deltaProxy{t: t, stream: stream, node: n, resps: make(chan *discoveryv3.DeltaDiscoveryResponse, 64),
		done: make(chan struct{}), held: map[string]map[string][]byte{}}
	t.Cleanup(func() {
		cancel()
		<-p.done
	})
	go func() {
		defer close(p.done)
		for {
			r, err := stream.Recv()
			if err != nil {
				p.err = err
				return
			}
			select {
			case p.resps <- r:
			case <-ctx.Done():
				p.err = ctx.Err()
				return
			}
		}
	}()
	return p
}

func (p *deltaProxy) send(req *discoveryv3.DeltaDiscoveryRequest) {
	p.t.Helper()
	if !p.sent {
		req.Node = p.node
		p.sent = true
	}
	if err := p.stream.Send(req); err != nil {
		p.t.Fatalf("send %s delta request: %v", req.GetTypeUrl(), err)
	}
}

func (p *deltaProxy) subscribe(typeURL string, names ...string) {
	p.t.Helper()
	p.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeURL, ResourceNamesSubscribe: names})
}

// next returns the next response, which must be of typeURL, and applies it
// to what the proxy holds.
func (p *deltaProxy) next(typeURL string) *discoveryv3.DeltaDiscoveryResponse {
	p.t.Helper()
	select {
	case r := <-p.resps:
		if r.GetTypeUrl() != typeURL {
			p.t.Fatalf("got a %s delta response, want %s", r.GetTypeUrl(), typeURL)
		}
		held := p.held[typeURL]
		if held == nil {
			held = map[string][]byte{}
			p.held[typeURL] = held
		}
		for _, res := range r.GetResources() {
			if res.GetName() == "" || res.GetVersion() == "" {
				p.t.Errorf("resource without name or version: %v", res)
			}
			held[res.GetName()] = res.GetResource().GetValue()
		}
		for _, n := range r.GetRemovedResources() {
			delete(held, n)
		}
		return r
	case <-p.done:
		p.t.Fatalf("stream ended while waiting for %s: %v", typeURL, p.err)
	case <-time.After(waitFor):
		p.t.Fatalf("no %s delta response", typeURL)
	}
	return nil
}

func (p *deltaProxy) ack(r *discoveryv3.DeltaDiscoveryResponse) {
	p.t.Helper()
	p.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()})
}

func (p *deltaProxy) nack(r *discoveryv3.DeltaDiscoveryResponse, reason string) {
	p.t.Helper()
	p.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce(),
		ErrorDetail: &statuspb.Status{Code: int32(codes.InvalidArgument), Message: reason}})
}

func (p *deltaProxy) quiet(d time.Duration, why string) {
	p.t.Helper()
	select {
	case r := <-p.resps:
		p.t.Fatalf("%s: got a %s delta response (%d resources, removed %v)", why, r.GetTypeUrl(), len(r.GetResources()), r.GetRemovedResources())
	case <-p.done:
		p.t.Fatalf("%s: stream ended: %v", why, p.err)
	case <-time.After(d):
	}
}

func resourceNames(r *discoveryv3.DeltaDiscoveryResponse) []string {
	var out []string
	for _, res := range r.GetResources() {
		out = append(out, res.GetName())
	}
	return out
}

// sotwHeld returns a state-of-the-world response's resources by name.
func sotwHeld(t *testing.T, r *discoveryv3.DiscoveryResponse) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	ns := adstest.Names(t, r)
	for i, a := range r.GetResources() {
		out[ns[i]] = a.GetValue()
	}
	return out
}

// TestDeltaAndSotWConverge drives an Envoy sidecar over both ADS variants
// for the same config: they hold identical resources, and after a change
// the delta client receives only what changed while the SotW client gets
// the whole type again.
func TestDeltaAndSotWConverge(t *testing.T) {
	f := newFixture(t, nil)
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, envoyMesh)))
	id := "sidecar~10.9.0.1~client-1.shop~shop.svc.cluster.local"
	s := f.connect(t, envoyNode(id, map[string]string{"app": "client"}))
	d := f.connectDelta(t, envoyNode(id, map[string]string{"app": "client"}))

	sotw := map[string]map[string][]byte{}
	for _, typeURL := range []string{typeurl.Cluster, typeurl.Listener} {
		s.Subscribe(typeURL)
		r := s.Next(typeURL)
		sotw[typeURL] = sotwHeld(t, r)
		s.ACK(r)
		d.subscribe(typeURL)
		d.ack(d.next(typeURL))
	}
	var eds []string
	for n := range sotw[typeurl.Cluster] {
		if n == "outbound|9080|v2|reviews.shop.svc.cluster.local" || n == "outbound|9080||reviews.shop.svc.cluster.local" {
			eds = append(eds, n)
		}
	}
	slices.Sort(eds)
	for _, sub := range []struct {
		typeURL string
		names   []string
	}{{typeurl.Endpoint, eds}, {typeurl.Route, []string{envoy.SidecarRouteName(9080)}}} {
		s.Subscribe(sub.typeURL, sub.names...)
		r := s.Next(sub.typeURL)
		sotw[sub.typeURL] = sotwHeld(t, r)
		s.ACK(r, sub.names...)
		d.subscribe(sub.typeURL, sub.names...)
		d.ack(d.next(sub.typeURL))
	}
	for typeURL, want := range sotw {
		if len(want) == 0 {
			t.Errorf("SotW client holds no %s", typeURL)
		}
		if got := d.held[typeURL]; !maps.EqualFunc(got, want, slices.Equal) {
			t.Errorf("%s: delta client holds %v, SotW client %v", shortName(typeURL), keys(got), keys(want))
		}
	}

	// Point the gateway's VirtualService elsewhere and drop subset v1: the
	// delta client gets one removed cluster (and its endpoints), nothing
	// else of CDS, and no listener or route update it does not need.
	changed := envoyMeshWithout(t, "{name: v1, labels: {version: v1}}, ")
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, changed)))
	r := d.next(typeurl.Cluster)
	if len(r.GetResources()) != 0 || !slices.Equal(r.GetRemovedResources(), []string{"outbound|9080|v1|reviews.shop.svc.cluster.local"}) {
		t.Errorf("delta CDS after dropping subset v1: resources %v, removed %v; want only the v1 cluster removed",
			resourceNames(r), r.GetRemovedResources())
	}
	d.ack(r)
	full := s.Next(typeurl.Cluster)
	if len(full.GetResources()) != len(sotw[typeurl.Cluster])-1 {
		t.Errorf("SotW CDS after the change has %d clusters, want %d", len(full.GetResources()), len(sotw[typeurl.Cluster])-1)
	}
	s.ACK(full)
	d.quiet(quietFor, "the listeners, routes and subscribed endpoints did not change")
}

// envoyMeshWithout is envoyMesh with cut removed (which must occur).
func envoyMeshWithout(t *testing.T, cut string) string {
	t.Helper()
	i := strings.Index(envoyMesh, cut)
	if i < 0 {
		t.Fatalf("%q not in the test mesh", cut)
	}
	return envoyMesh[:i] + envoyMesh[i+len(cut):]
}

// TestDeltaSubscriptions covers named subscriptions: a name that does not
// exist is answered as removed (the client need not wait for a timeout),
// unsubscribing and subscribing again sends the resource again, and
// removal of a subscribed resource is announced.
func TestDeltaSubscriptions(t *testing.T) {
	f := newFixture(t, nil)
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, pushctxtest.EchoYAML(80, 20, "ROUND_ROBIN"))))
	d := f.connectDelta(t, node("proxyless-1", "m"))

	d.subscribe(typeurl.Cluster, echoV1, "outbound|7070|v9|echo.demo.svc.cluster.local")
	r := d.next(typeurl.Cluster)
	if !slices.Equal(resourceNames(r), []string{echoV1}) || !slices.Equal(r.GetRemovedResources(), []string{"outbound|7070|v9|echo.demo.svc.cluster.local"}) {
		t.Fatalf("resources %v, removed %v; want %s and the missing v9 reported removed", resourceNames(r), r.GetRemovedResources(), echoV1)
	}
	d.ack(r)

	// Adding a name sends just that one.
	d.subscribe(typeurl.Cluster, echoV2)
	r = d.next(typeurl.Cluster)
	if !slices.Equal(resourceNames(r), []string{echoV2}) || len(r.GetRemovedResources()) != 0 {
		t.Fatalf("after subscribing %s: resources %v, removed %v", echoV2, resourceNames(r), r.GetRemovedResources())
	}
	d.ack(r)

	// Unsubscribe, then subscribe again: sent again.
	d.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeurl.Cluster, ResourceNamesUnsubscribe: []string{echoV2}})
	d.quiet(quietFor, "unsubscribing is not answered")
	d.subscribe(typeurl.Cluster, echoV2)
	r = d.next(typeurl.Cluster)
	if !slices.Equal(resourceNames(r), []string{echoV2}) {
		t.Fatalf("re-subscribing %s: resources %v", echoV2, resourceNames(r))
	}
	d.ack(r)

	// Removing the DestinationRule removes both subsets' clusters.
	y := pushctxtest.EchoYAML(80, 20, "ROUND_ROBIN")
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, y[:strings.Index(y, "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule")]+
		y[strings.Index(y, "---\napiVersion: networking.istio.io/v1\nkind: VirtualService"):])))
	r = d.next(typeurl.Cluster)
	if len(r.GetResources()) != 0 || !slices.Equal(r.GetRemovedResources(), []string{echoV1, echoV2}) {
		t.Fatalf("after removing the subsets: resources %v, removed %v", resourceNames(r), r.GetRemovedResources())
	}
	d.ack(r)
	if n := len(d.held[typeurl.Cluster]); n != 0 {
		t.Errorf("client still holds %d clusters", n)
	}
}

// TestDeltaNACKAndReconnect: a NACKed version is not sent again, the
// reason shows in the status, and a proxy reconnecting with the versions it
// holds receives nothing it already has.
func TestDeltaNACKAndReconnect(t *testing.T) {
	f := newFixture(t, nil)
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, pushctxtest.EchoYAML(80, 20, "ROUND_ROBIN"))))
	d := f.connectDelta(t, node("proxyless-n", "m"))
	d.subscribe(typeurl.Cluster)
	r := d.next(typeurl.Cluster)
	if len(r.GetResources()) == 0 {
		t.Fatal("wildcard CDS is empty")
	}
	versions := map[string]string{}
	for _, res := range r.GetResources() {
		versions[res.GetName()] = res.GetVersion()
	}
	d.nack(r, "cluster rejected by the test")
	// A rebuild with the same content must not re-send the rejected versions.
	f.republish(t, "m")
	d.quiet(quietFor, "the NACKed content did not change")
	// The status is the stream's record of the NACK: awaited, since the
	// quiet period says nothing of when the stream handled it.
	testwait.For(t, waitFor, func() error {
		if ts := f.connStatus(t, "proxyless-n").Types["Cluster"]; ts.NackReason != "cluster rejected by the test" || ts.NackedVersion == "" || ts.AckedVersion != "" {
			return fmt.Errorf("status after NACK: %+v", ts)
		}
		return nil
	})
	// New content is sent: only the changed cluster.
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, pushctxtest.EchoYAML(80, 20, "LEAST_REQUEST"))))
	r = d.next(typeurl.Cluster)
	if !slices.Equal(resourceNames(r), []string{echoV2}) {
		t.Errorf("after the change: resources %v, want only %s", resourceNames(r), echoV2)
	}
	d.ack(r)
	versions[echoV2] = r.GetResources()[0].GetVersion()
	testwait.For(t, waitFor, func() error {
		if ts := f.connStatus(t, "proxyless-n").Types["Cluster"]; ts.AckedVersion != ts.SentVersion || ts.NackReason != "" || ts.Pending {
			return fmt.Errorf("status after ACK: %+v", ts)
		}
		return nil
	})

	// Reconnect saying what it holds: the first answer is empty.
	d2 := f.connectDelta(t, node("proxyless-n2", "m"))
	d2.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeurl.Cluster, InitialResourceVersions: versions})
	r = d2.next(typeurl.Cluster)
	if len(r.GetResources()) != 0 || len(r.GetRemovedResources()) != 0 {
		t.Errorf("reconnect with current versions: resources %v, removed %v; want nothing", resourceNames(r), r.GetRemovedResources())
	}
	// One stale version: just that one is sent.
	versions[echoV1] = "stale"
	d3 := f.connectDelta(t, node("proxyless-n3", "m"))
	d3.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeurl.Cluster, InitialResourceVersions: versions})
	if r = d3.next(typeurl.Cluster); !slices.Equal(resourceNames(r), []string{echoV1}) {
		t.Errorf("reconnect with one stale version: resources %v, want %s", resourceNames(r), echoV1)
	}
}
