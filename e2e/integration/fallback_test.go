package integration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/hub/watch"
	"github.com/navemesh/nave/internal/testwait"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/spoke/fallback"
	"github.com/navemesh/nave/spoke/remote"
	"github.com/navemesh/nave/spoke/uplink"
	"github.com/navemesh/nave/xds/ads/adstest"
	"github.com/navemesh/nave/xds/cache"
	"github.com/navemesh/nave/xds/mesh"
	xdsproxy "github.com/navemesh/nave/xds/proxy"
	"github.com/navemesh/nave/xds/pushctx"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
	"github.com/navemesh/nave/xds/resource"
)

// clusterA holds the echo service's definition, routing and its v1
// endpoint; clusterB the v2 endpoint and a service of its own.
const clusterA = `apiVersion: networking.istio.io/v1
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
spec: {address: 127.0.0.1, ports: {grpc: 17071}, labels: {app: echo, version: v1}}
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
kind: VirtualService
metadata: {name: echo, namespace: demo}
spec:
  hosts: [echo.demo.svc.cluster.local]
  http:
  - route:
    - {destination: {host: echo.demo.svc.cluster.local, subset: v1}, weight: 30}
    - {destination: {host: echo.demo.svc.cluster.local, subset: v2}, weight: 70}
`

const clusterB = `apiVersion: networking.istio.io/v1
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
metadata: {name: echo-v2, namespace: demo}
spec: {address: 127.0.0.2, ports: {grpc: 17072}, labels: {app: echo, version: v2}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: only-b, namespace: demo}
spec:
  hosts: [only-b.demo.svc.cluster.local]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.2.0.1}]
`

// hubEngine is the hub's composition in process: ingest → pushctx →
// cache, with Watch served beside Push.
type hubEngine struct {
	in    *hubIngest
	pc    *pushctx.Publisher
	cache *cache.Cache
	addr  string
}

func startHubEngine(t *testing.T) *hubEngine { return startHubEngineWith(t, nil) }

// startHubEngineWith is startHubEngine whose meshes have the MeshConfig
// meshConfig gives (nil: none), in its push contexts and on Watch.
func startHubEngineWith(t *testing.T, meshConfig func(string) *meshv1alpha1.MeshConfig) *hubEngine {
	t.Helper()
	h := &hubEngine{}
	var w *watch.Server
	h.in = newHubIngest(ingest.StoreOptions{StaleGracePeriod: time.Hour,
		OnChange: func(m string, endpointsOnly bool) {
			if endpointsOnly {
				h.pc.NotifyEndpoints(m)
			} else {
				h.pc.Notify(m)
			}
			w.Notify(m)
		}}, ingest.ServerOptions{
		Watch: func(id ingest.ClusterIdentity, s protocolv1.Sync_WatchServer) error {
			return w.Serve(id.Mesh, id.Cluster, s)
		}})
	w = watch.New(h.in, watch.Options{Debounce: 10 * time.Millisecond, Ready: h.in.Ready, MeshConfig: meshConfig})
	h.pc = pushctx.New(h.in, pushctx.Options{DebounceQuiet: 10 * time.Millisecond, DebounceMax: 100 * time.Millisecond,
		Ready: h.in.Ready, MeshConfig: meshConfig, OnPublish: func(st *pushctx.State) { h.cache.Entry(st) }})
	h.cache = cache.New(h.pc, cache.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	h.pc.Start(ctx)
	h.addr = serveGRPC(t, func(s *grpc.Server) { protocolv1.RegisterSyncServer(s, h.in.srv) })
	return h
}

// startFallback runs a fallback server for cluster a of mesh m whose hub
// health is hubUp.
func startFallback(t *testing.T, view *remote.View, hubUp *atomic.Bool, opts fallback.Options) (*fallback.Server, string) {
	t.Helper()
	opts.Mesh, opts.Cluster, opts.View = "m", "a", view
	opts.DebounceQuiet, opts.DebounceMax, opts.Tick = 10*time.Millisecond, 100*time.Millisecond, 10*time.Millisecond
	opts.HubSynced = func() error {
		if hubUp.Load() {
			return nil
		}
		return fmt.Errorf("hub down")
	}
	fb := fallback.New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { fb.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	addr := serveGRPC(t, func(s *grpc.Server) { discoveryv3.RegisterAggregatedDiscoveryServiceServer(s, fb) })
	return fb, addr
}

// hashes is a result's content: type URL -> name -> content hash.
func hashes(r *resource.ProxyResources) map[string]map[string]string {
	out := map[string]map[string]string{}
	for t, byName := range r.Resources {
		out[t] = map[string]string{}
		for n, p := range byName {
			out[t][n] = p.Hash
		}
	}
	return out
}

func equalHashes(a, b map[string]map[string]string) bool {
	return maps.EqualFunc(a, b, func(x, y map[string]string) bool { return maps.Equal(x, y) })
}

func current(t *testing.T, pc *pushctx.Publisher) *pushctx.State {
	st, _ := pc.Current("m")
	return st
}

func bothSynced(st *pushctx.State) bool {
	if st == nil || len(st.Snapshot.Clusters) != 2 {
		return false
	}
	for _, c := range st.Snapshot.Clusters {
		if !c.Synced {
			return false
		}
	}
	return true
}

// hubAndStandbyFallback runs clusters a and b on h, a with a remote view,
// and a fallback of a on standby. Once a is synced with the hub and its
// view watched, the fallback is told the hub is lost (it does not serve
// for an hour): it takes the remote view into its builds, which a standby
// fallback leaves in its wire form until then (decision 050). It returns
// once both push contexts are built from both clusters (and the
// fallback's passes also, if set).
func hubAndStandbyFallback(t *testing.T, h *hubEngine, also func(*pushctx.State) error) *fallback.Server {
	t.Helper()
	a, b := pushctxtest.Decode(t, clusterA), pushctxtest.Decode(t, clusterB)
	runUplink(t, uplink.Options{Address: h.addr, Mesh: "m", Cluster: "b"}, b)
	view := remote.New("m", "a")
	upA := runUplink(t, uplink.Options{Address: h.addr, Mesh: "m", Cluster: "a", View: view}, a)
	var hubUp atomic.Bool
	hubUp.Store(true)
	fb, _ := startFallback(t, view, &hubUp, fallback.Options{After: time.Hour})
	fb.Update(a)
	testwait.For(t, waitFor, func() error {
		if err := upA.Synced(); err != nil {
			return err
		}
		if st := upA.Status(); st.Watch != uplink.WatchSynced {
			return fmt.Errorf("watch %s", st.Watch)
		}
		if !bothSynced(current(t, h.pc)) {
			return fmt.Errorf("the hub's push context is not built from both clusters yet")
		}
		return nil
	})
	hubUp.Store(false)
	testwait.For(t, waitFor, func() error {
		st := current(t, fb.Publisher())
		if !bothSynced(st) {
			return fmt.Errorf("push contexts not built from both clusters yet")
		}
		if also != nil {
			return also(st)
		}
		return nil
	})
	return fb
}

// A spoke in fallback generates for a proxy exactly what the hub
// generates for it from the same inputs (its own cluster live, the other
// from Watch): same resources, same bytes.
func TestFallbackGeneratesWhatTheHubGenerates(t *testing.T) {
	h := startHubEngine(t)
	fb := hubAndStandbyFallback(t, h, nil)
	hubState, _ := h.cache.Current("m")
	fbState, _ := fb.Resources().Current("m")
	keys := []xdsproxy.Key{
		{Type: xdsproxy.Sidecar, Mesh: "m", Namespace: "demo", Labels: "app=client", IPs: "10.1.0.5", Locality: mesh.Locality{}},
		{Type: xdsproxy.Sidecar, Mesh: "m", Namespace: "demo", Labels: "app=echo\nversion=v1", IPs: "127.0.0.1"},
		{Type: xdsproxy.Router, Mesh: "m", Namespace: "istio-system", Labels: "istio=ingressgateway", IPs: "10.1.0.9"},
	}
	for _, k := range keys {
		hub, spoke := hashes(hubState.ForProxy(k)), hashes(fbState.ForProxy(k))
		if len(hub[typeurl.Cluster]) == 0 {
			t.Fatalf("%v: the hub generated no clusters", k)
		}
		if !equalHashes(hub, spoke) {
			t.Errorf("%v: fallback output differs from the hub's:\nhub   %v\nspoke %v", k, hub, spoke)
		}
	}
	pk := xdsproxy.Key{Type: xdsproxy.GRPC, Mesh: "m", Namespace: "demo"}
	hub, spoke := hashes(hubState.ProxylessFor(pk)), hashes(fbState.ProxylessFor(pk))
	if len(hub[typeurl.Endpoint]) == 0 || !equalHashes(hub, spoke) {
		t.Errorf("proxyless output differs:\nhub   %v\nspoke %v", hub, spoke)
	}
	// Both clusters' endpoints are in the spoke's output.
	var eps []string
	for n := range spoke[typeurl.Endpoint] {
		eps = append(eps, n)
	}
	if !slices.ContainsFunc(eps, func(n string) bool { return strings.Contains(n, "only-b") }) {
		t.Errorf("the spoke's output lacks cluster b's service: %v", eps)
	}
}

// A spoke in fallback builds with its mesh's MeshConfig as the hub gave
// it on Watch, and so generates what the hub generates under it.
func TestFallbackGeneratesWhatTheHubGeneratesUnderTheMeshConfig(t *testing.T) {
	cfg := &meshv1alpha1.MeshConfig{
		OutboundTrafficPolicy: &meshv1alpha1.MeshConfig_OutboundTrafficPolicy{Mode: meshv1alpha1.MeshConfig_OutboundTrafficPolicy_REGISTRY_ONLY},
		ConnectTimeout:        durationpb.New(3 * time.Second),
	}
	h := startHubEngineWith(t, func(string) *meshv1alpha1.MeshConfig { return cfg })
	fb := hubAndStandbyFallback(t, h, func(st *pushctx.State) error {
		if !proto.Equal(st.Snapshot.MeshConfig, cfg) {
			return fmt.Errorf("the fallback builds with mesh config %v", st.Snapshot.MeshConfig)
		}
		return nil
	})
	hubState, _ := h.cache.Current("m")
	fbState, _ := fb.Resources().Current("m")
	k := xdsproxy.Key{Type: xdsproxy.Sidecar, Mesh: "m", Namespace: "demo", Labels: "app=client", IPs: "10.1.0.5"}
	hub, spoke := hashes(hubState.ForProxy(k)), hashes(fbState.ForProxy(k))
	if len(hub[typeurl.Cluster]) == 0 || !equalHashes(hub, spoke) {
		t.Errorf("fallback output differs from the hub's under the mesh config:\nhub   %v\nspoke %v", hub, spoke)
	}
	// The mesh config made a difference: the mesh's connect timeout is
	// the outbound clusters'.
	var c clusterv3.Cluster
	if err := fbState.ForProxy(k).Resources[typeurl.Cluster]["outbound|80||only-b.demo.svc.cluster.local"].Any.UnmarshalTo(&c); err != nil {
		t.Fatal(err)
	}
	if got := c.GetConnectTimeout().AsDuration(); got != 3*time.Second {
		t.Errorf("the fallback's outbound cluster connects within %s; want the mesh config's 3s", got)
	}
}

// The fallback server refuses proxies while the hub serves, serves them
// after fallback.after without the hub (SotW and delta), and hands them
// back once the hub has been synced for handBackAfter.
func TestFallbackServesWhileTheHubIsGoneAndHandsBack(t *testing.T) {
	view := remote.New("m", "a")
	var hubUp atomic.Bool
	hubUp.Store(true)
	fb, addr := startFallback(t, view, &hubUp, fallback.Options{After: 50 * time.Millisecond, HandBackAfter: 100 * time.Millisecond, Drain: 50 * time.Millisecond})
	fb.Update(pushctxtest.Decode(t, clusterA))

	conn := dialInsecure(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("while the hub serves: err = %v, want Unavailable", err)
	}

	hubUp.Store(false)
	testwait.For(t, waitFor, func() error {
		if !fb.Active() {
			return fmt.Errorf("not active")
		}
		return nil
	})
	p := adstest.Connect(t, conn, node("client-1", "m"))
	p.Subscribe(typeurl.Listener, "echo.demo.svc.cluster.local:7070")
	if got := adstest.Names(t, p.Next(typeurl.Listener)); !slices.Equal(got, []string{"echo.demo.svc.cluster.local:7070"}) {
		t.Fatalf("listeners = %v", got)
	}
	d, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node("client-2", "m"), TypeUrl: typeurl.Cluster})
	r, err := d.Recv()
	if err != nil || len(r.GetResources()) == 0 {
		t.Fatalf("delta: %v, %v", r, err)
	}
	if st := fb.Status(); st.Proxies != 2 || st.Transitions != 1 {
		t.Fatalf("status %+v", st)
	}

	// The hub is back: after handBackAfter the streams are closed with
	// UNAVAILABLE, gradually, and new ones are refused.
	hubUp.Store(true)
	if _, err := d.Recv(); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "hub is back") {
		t.Fatalf("delta stream at hand-back: err = %v", err)
	}
	testwait.For(t, waitFor, func() error {
		if st := fb.Status(); st.Active || st.Proxies != 0 || st.Transitions != 2 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
}
