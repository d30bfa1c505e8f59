package ads_test

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/ads"
	"github.com/navemesh/nave/xds/ads/adstest"
	"github.com/navemesh/nave/xds/gen"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
)

func TestChangesArePushedOnlyWhereContentChanged(t *testing.T) {
	f := newFixture(t, nil)
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, pushctxtest.EchoYAML(80, 20, "ROUND_ROBIN"))))

	// p follows one cluster, the listener and its routes; q every cluster.
	p := f.connect(t, node("proxy-p", "m"))
	for _, sub := range []struct{ typeURL, name string }{
		{typeurl.Cluster, echoV1}, {typeurl.Listener, echoListener}, {typeurl.Route, echoListener},
	} {
		p.Subscribe(sub.typeURL, sub.name)
		p.ACK(p.Next(sub.typeURL), sub.name)
	}
	q := f.connect(t, node("proxy-q", "m"))
	q.Subscribe(typeurl.Cluster)
	cds := q.Next(typeurl.Cluster)
	q.ACK(cds)

	// New weights change the routes only.
	before := stateVersion(t, f, p)
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, pushctxtest.EchoYAML(20, 80, "ROUND_ROBIN"))))
	// Types are sent clusters first, routes last: a route response first
	// means no cluster or listener was sent for this change.
	rds := p.Next(typeurl.Route)
	if got, want := weights(t, rds), map[string]uint32{echoV1: 20, echoV2: 80}; !maps.Equal(got, want) {
		t.Errorf("route weights after the change = %v, want %v", got, want)
	}
	if rds.GetVersionInfo() == before[typeurl.Route] {
		t.Errorf("changed routes kept version %s", rds.GetVersionInfo())
	}
	p.ACK(rds, echoListener)
	q.Quiet(quietFor, "a route change does not change clusters")

	// Subset v2's load balancer changes a cluster p does not follow.
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, pushctxtest.EchoYAML(20, 80, "LEAST_REQUEST"))))
	cds2 := q.Next(typeurl.Cluster)
	if cds2.GetVersionInfo() == cds.GetVersionInfo() || lbPolicy(t, cds2, echoV2) != clusterv3.Cluster_LEAST_REQUEST {
		t.Errorf("wildcard CDS after the change: version %s (was %s), want a new one with %s least-request",
			cds2.GetVersionInfo(), cds.GetVersionInfo(), echoV2)
	}
	q.ACK(cds2)
	p.Quiet(quietFor, "the changed cluster is not subscribed")

	// An ACKed proxy that asks again for the same names gets nothing new.
	p.ACK(rds, echoListener)
	p.Quiet(quietFor, "a repeated ACK changes nothing")
}

// stateVersion returns the versions last sent to p's node by type URL.
func stateVersion(t *testing.T, f *fixture, p *proxy) map[string]string {
	t.Helper()
	out := map[string]string{}
	for short, ts := range f.connStatus(t, p.Node().GetId()).Types {
		for _, typeURL := range gen.Types {
			if shortName(typeURL) == short {
				out[typeURL] = ts.SentVersion
			}
		}
	}
	return out
}

func lbPolicy(t *testing.T, resp *discoveryv3.DiscoveryResponse, name string) clusterv3.Cluster_LbPolicy {
	t.Helper()
	for _, a := range resp.GetResources() {
		var c clusterv3.Cluster
		if err := a.UnmarshalTo(&c); err != nil {
			t.Fatal(err)
		}
		if c.GetName() == name {
			return c.GetLbPolicy()
		}
	}
	t.Fatalf("no cluster %s", name)
	return 0
}

func TestNACKedVersionIsNotResent(t *testing.T) {
	f := newFixture(t, nil)
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, pushctxtest.EchoYAML(80, 20, "ROUND_ROBIN"))))
	p := f.connect(t, node("proxy-1", "m"))
	p.Subscribe(typeurl.Route, echoListener)
	rds1 := p.Next(typeurl.Route)
	p.ACK(rds1, echoListener)

	f.set(t, "m", synced("c1", pushctxtest.Decode(t, pushctxtest.EchoYAML(20, 80, "ROUND_ROBIN"))))
	rds2 := p.Next(typeurl.Route)
	const reason = "route weights: not supported by this client"
	p.NACK(rds2, rds1.GetVersionInfo(), reason, echoListener)
	p.Quiet(quietFor, "a NACK is not answered with the same version")
	f.republish(t, "m")
	p.Quiet(quietFor, "a rebuild with the same content does not re-send the NACKed version")

	// The status is the stream's record of the NACK: awaited, since the
	// quiet periods above say nothing of when the stream handled it.
	testwait.For(t, waitFor, func() error {
		ts := f.connStatus(t, "proxy-1").Types["RouteConfiguration"]
		if ts.NackedVersion != rds2.GetVersionInfo() || ts.NackReason != reason || ts.AckedVersion != rds1.GetVersionInfo() || ts.Pending {
			return fmt.Errorf("route status = %+v, want version %s NACKed with %q and %s still ACKed", ts, rds2.GetVersionInfo(), reason, rds1.GetVersionInfo())
		}
		return nil
	})

	// A real change is sent.
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, pushctxtest.EchoYAML(50, 50, "ROUND_ROBIN"))))
	rds3 := p.Next(typeurl.Route)
	if v := rds3.GetVersionInfo(); v == rds1.GetVersionInfo() || v == rds2.GetVersionInfo() {
		t.Errorf("the change after a NACK has an old version %s", v)
	}
	if got, want := weights(t, rds3), map[string]uint32{echoV1: 50, echoV2: 50}; !maps.Equal(got, want) {
		t.Errorf("route weights = %v, want %v", got, want)
	}
	p.ACK(rds3, echoListener)

	// A late NACK of an older response is stale and ignored. The listener
	// request after it is answered, so the NACK has been handled by then.
	p.NACK(rds2, rds3.GetVersionInfo(), "stale", echoListener)
	p.Subscribe(typeurl.Listener, echoListener)
	p.Next(typeurl.Listener)
	ts := f.connStatus(t, "proxy-1").Types["RouteConfiguration"]
	if ts.AckedVersion != rds3.GetVersionInfo() || ts.NackReason != "" || ts.Pending {
		t.Errorf("route status = %+v, want %s ACKed and no NACK", ts, rds3.GetVersionInfo())
	}
}

// bigService is a service with n endpoints on the given target port;
// withPort returns it with another one, so that every change changes a
// large endpoints response.
func bigService(t *testing.T, n int) []*meshconfig.Object {
	t.Helper()
	var b strings.Builder
	b.WriteString(`apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: big, namespace: demo}
spec: {host: big.demo.svc.cluster.local}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: big, namespace: demo}
spec:
  hosts: [big.demo.svc.cluster.local]
  ports: [{number: 7070, name: grpc, protocol: GRPC, targetPort: 20000}]
  resolution: STATIC
  endpoints:
`)
	for i := range n {
		fmt.Fprintf(&b, "  - {address: 10.%d.%d.%d}\n", i>>16&255, i>>8&255, i&255)
	}
	return pushctxtest.Decode(t, b.String())
}

func withPort(objs []*meshconfig.Object, port uint32) []*meshconfig.Object {
	out := make([]*meshconfig.Object, len(objs))
	for i, o := range objs {
		if se, ok := o.Spec.(*networking.ServiceEntry); ok {
			c := *o
			spec := proto.Clone(se).(*networking.ServiceEntry)
			spec.Ports[0].TargetPort = port
			c.Spec = spec
			c.Version = c.ComputeVersion()
			o = &c
		}
		out[i] = o
	}
	return out
}

func TestSlowProxyDoesNotBlockOthers(t *testing.T) {
	const (
		// About 44 KiB per response: a few of them fill the stream's
		// flow-control window and the server's write quota (64 KiB each).
		endpoints = 1500
		changes   = 10
		bigEDS    = "outbound|7070||big.demo.svc.cluster.local"
	)
	// SendTimeout: long enough for every change to reach b while a is
	// stuck; then the server's giving up on a shows it was stuck.
	f := newFixture(t, nil, func(o *ads.Options) { o.SendTimeout = 2 * time.Second })
	big := bigService(t, endpoints)
	f.set(t, "m", synced("c1", big))

	// Proxy a reads its first response, then never again. A fixed window
	// keeps gRPC from growing it, so the server soon cannot send to a.
	small := []grpc.DialOption{grpc.WithInitialWindowSize(64 << 10), grpc.WithInitialConnWindowSize(64 << 10)}
	a := f.open(t, dial(t, f.addr, small...), node("proxy-a", "m"))
	a.Subscribe(typeurl.Endpoint)
	if r, err := a.Stream.Recv(); err != nil || r.GetTypeUrl() != typeurl.Endpoint {
		t.Fatalf("proxy a's first response: %v, %v", r, err)
	}

	b := f.connect(t, node("proxy-b", "m"))
	b.Subscribe(typeurl.Endpoint, bigEDS)
	b.ACK(b.Next(typeurl.Endpoint), bigEDS)

	for i := 1; i <= changes; i++ {
		port := uint32(20000 + i)
		f.set(t, "m", synced("c1", withPort(big, port)))
		eds := b.Next(typeurl.Endpoint)
		if got := ports(t, eds); !maps.Equal(got, map[uint32]int{port: endpoints}) {
			t.Fatalf("change %d: proxy b got endpoint ports %v, want %d on %d", i, got, endpoints, port)
		}
		b.ACK(eds, bigEDS)
	}

	// a really is stuck: the server could not send it the last change, and
	// it gives up on a once one response has waited SendTimeout.
	sentB := f.connStatus(t, "proxy-b").Types["ClusterLoadAssignment"].SentVersion
	if sentA := f.connStatus(t, "proxy-a").Types["ClusterLoadAssignment"].SentVersion; sentA == sentB {
		t.Errorf("proxy a, which stopped reading, was sent every change (version %s): the test did not exercise a blocked stream", sentA)
	}
	testwait.Until(t, "proxy a disconnected as stuck", func() bool { return f.metric(t, "nave_xds_stuck_disconnects_total") == 1 })
}

// TestSotWEndpointUpdatesCarryOnlyChangedAssignments: endpoints are not a
// root type, so after the first full answer an update carries only the
// assignments that changed; clusters (a root type) are always complete.
func TestSotWEndpointUpdatesCarryOnlyChangedAssignments(t *testing.T) {
	f := newFixture(t, nil)
	y := pushctxtest.EchoYAML(80, 20, "ROUND_ROBIN")
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, y)))
	p := f.connect(t, node("proxy-eds", "m"))
	subs := []string{echoCluster, echoV1, echoV2}
	p.Subscribe(typeurl.Endpoint, subs...)
	first := p.Next(typeurl.Endpoint)
	if got := adstest.Names(t, first); len(got) != 3 {
		t.Fatalf("first EDS answer has %v, want all three subscribed", got)
	}
	p.ACK(first, subs...)

	// Move echo-v2 to another port: the v2 subset's and the service's
	// assignments change, v1's does not.
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, strings.Replace(y, "ports: {grpc: 17072}", "ports: {grpc: 17073}", 1))))
	upd := p.Next(typeurl.Endpoint)
	got := adstest.Names(t, upd)
	sort.Strings(got)
	if want := []string{echoV2, echoCluster}; !slices.Equal(got, want) { // sorted
		t.Errorf("EDS update carries %v, want only the changed %v", got, want)
	}
	if upd.GetVersionInfo() == first.GetVersionInfo() {
		t.Error("the update kept the version")
	}
	p.ACK(upd, subs...)
	p.Quiet(quietFor, "nothing else changed")
	// The ACK of the pushed change is a convergence sample; the first
	// answer (to the proxy's request) is not.
	testwait.Until(t, "one convergence sample", func() bool { return f.metric(t, "nave_xds_convergence_seconds") == 1 })
	// A response is counted once its send returned, which can be after
	// the proxy read it: awaited.
	testwait.For(t, waitFor, func() error {
		if n := f.metric(t, "nave_xds_pushes_total"); n != 2 {
			return fmt.Errorf("%v responses counted, want 2 (request, endpoints)", n)
		}
		return nil
	})
}

// TestANewClusterIsPushedBeforeTheRouteThatNamesIt: a route change that
// sends traffic to a cluster the proxy has never had (a new subset) reaches
// a proxy watching every cluster, its listener and routes, clusters first
// (make before break): the new cluster arrives before the route naming it.
// (grpc-go's "unknown cluster selected for RPC" on such a change is its own
// race, docs/fallback.md; this keeps our order from being a cause.)
func TestANewClusterIsPushedBeforeTheRouteThatNamesIt(t *testing.T) {
	f := newFixture(t, nil)
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, pushctxtest.EchoYAML(50, 50, ""))))
	p := f.connect(t, node("proxy-p", "m"))
	p.Subscribe(typeurl.Cluster)
	cds := p.Next(typeurl.Cluster)
	p.ACK(cds)
	for _, typeURL := range []string{typeurl.Listener, typeurl.Route} {
		p.Subscribe(typeURL, echoListener)
		p.ACK(p.Next(typeURL), echoListener)
	}
	const echoV3 = "outbound|7070|v3|echo.demo.svc.cluster.local"
	if slices.Contains(adstest.Names(t, cds), echoV3) {
		t.Fatalf("%s exists before the change", echoV3)
	}

	v3 := strings.Replace(pushctxtest.EchoYAML(50, 50, ""), "  - {name: v2, labels: {version: v2}}",
		"  - {name: v2, labels: {version: v2}}\n  - {name: v3, labels: {version: v3}}", 1)
	v3 = strings.Replace(v3, "subset: v2}", "subset: v3}", 1) + `---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: echo-v3, namespace: demo}
spec: {address: 127.0.0.1, ports: {grpc: 17073}, labels: {app: echo, version: v3}}
`
	f.set(t, "m", synced("c1", pushctxtest.Decode(t, v3)))
	// Next fails the test on a response of another type: the route must
	// not come first.
	cds2 := p.Next(typeurl.Cluster)
	if !slices.Contains(adstest.Names(t, cds2), echoV3) {
		t.Fatalf("clusters after the change: %v, want %s among them", adstest.Names(t, cds2), echoV3)
	}
	p.ACK(cds2)
	rds := p.Next(typeurl.Route)
	if got, want := weights(t, rds), map[string]uint32{echoV1: 50, echoV3: 50}; !maps.Equal(got, want) {
		t.Fatalf("route weights after the change = %v, want %v", got, want)
	}
	p.ACK(rds, echoListener)
}
