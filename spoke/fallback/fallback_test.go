package fallback

import (
	"errors"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/spoke/remote"
)

// The state machine: active only after After without the hub and with the
// local state in; back only after HandBackAfter of continuous health, so a
// hub that comes and goes does not make it flap. The engine runs (its
// builds are what the spoke waits for before it serves); the test drives
// the state machine's clock.
func TestFallbackActivatesAfterAndHandsBackWithHysteresis(t *testing.T) {
	s := New(Options{Mesh: "m", Cluster: "a", After: 5 * time.Second, HandBackAfter: 30 * time.Second, HubSynced: func() error { return nil }})
	s.engine.Start(t.Context())
	t0 := time.Now()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	s.step(at(0), true)
	s.step(at(time.Second), false) // hub lost at 1 s
	s.step(at(10*time.Second), false)
	if s.Active() {
		t.Fatal("active before the local state was in")
	}
	s.Update(nil)
	s.step(at(11*time.Second), false) // prepares: a build with the remote view
	awaitRemoteBuilt(t, s)
	s.step(at(11*time.Second), false)
	if !s.Active() {
		t.Fatal("not active 10 s after the hub was lost")
	}

	// The hub comes and goes three times in 10 s: no hand-back.
	for i := range 3 {
		base := 20*time.Second + time.Duration(i)*3*time.Second
		s.step(at(base), true)
		s.step(at(base+2*time.Second), false)
	}
	if !s.Active() || s.Status().Transitions != 1 {
		t.Fatalf("flapped: %+v", s.Status())
	}
	s.step(at(40*time.Second), true)
	s.step(at(69*time.Second), true)
	if !s.Active() {
		t.Fatal("handed back before handBackAfter of health")
	}
	s.step(at(70*time.Second), true)
	if s.Active() || s.Status().Transitions != 2 {
		t.Fatalf("not handed back after 30 s of health: %+v", s.Status())
	}

	// Lost again: After counts from the loss, not from the start.
	s.step(at(80*time.Second), false)
	awaitRemoteBuilt(t, s)
	s.step(at(84*time.Second), false)
	if s.Active() {
		t.Fatal("active again before After")
	}
	s.step(at(85*time.Second), false)
	if !s.Active() {
		t.Fatal("not active again after After")
	}
}

// awaitRemoteBuilt waits until s has published a push context with the
// remote view since it began preparing.
func awaitRemoteBuilt(t *testing.T, s *Server) {
	t.Helper()
	testwait.For(t, 10*time.Second, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.remoteBuilt {
			return errors.New("no push context with the remote view published yet")
		}
		return nil
	})
}

// Before the hub was ever lost, builds take in the local cluster alone
// (the remote view stays in its wire form); from the loss on, the view.
func TestFallbackTakesInTheRemoteViewOnceTheHubIsLost(t *testing.T) {
	view := remote.New("m", "a")
	s := New(Options{Mesh: "m", Cluster: "a", After: 5 * time.Second, HandBackAfter: 30 * time.Second, View: view, HubSynced: func() error { return nil }})
	s.engine.Start(t.Context())
	st := &protocolv1.ClusterStatus{Cluster: "b", Connected: true, Synced: true}
	body, err := anypb.New(st)
	if err != nil {
		t.Fatal(err)
	}
	view.Apply(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: protocol.ClusterStatusTypeURL, Resources: []*discoveryv3.Resource{{Name: "b", Version: "1", Resource: body}}})
	s.Update(nil)
	t0 := time.Now()
	s.step(t0, true)
	if got := s.Clusters("m"); len(got) != 1 {
		t.Fatalf("standby builds take in %d clusters, want the local one", len(got))
	}
	s.step(t0.Add(time.Second), false)
	awaitRemoteBuilt(t, s)
	if got := s.Clusters("m"); len(got) != 2 || got[1].Name != "b" {
		t.Fatalf("after the hub's loss builds take in %+v, want a and b", got)
	}
	if s.Active() {
		t.Fatal("active before After")
	}
	s.step(t0.Add(6*time.Second), false)
	if !s.Active() {
		t.Fatal("not active After the loss")
	}
}

func TestFallbackServesOnlyItsOwnMesh(t *testing.T) {
	s := New(Options{Mesh: "m", Cluster: "a"})
	s.Update(nil)
	if got := s.Clusters("other"); got != nil {
		t.Fatalf("another mesh has clusters: %+v", got)
	}
	if got := s.Clusters("m"); len(got) != 1 || got[0].Name != "a" || !got[0].Synced || got[0].DomainSuffix != "cluster.local" {
		t.Fatalf("clusters = %+v", got)
	}
}

// The engine's MeshConfig is the remote view's, for the spoke's own mesh
// only, and Istio's defaults (nil) without a view.
func TestFallbackMeshConfigIsTheViewsForItsOwnMesh(t *testing.T) {
	if got := New(Options{Mesh: "m", Cluster: "a", HubSynced: func() error { return nil }}).meshConfig("m"); got != nil {
		t.Fatalf("without a view: %v, want nil", got)
	}
	view := remote.New("m", "a")
	body, err := anypb.New(&meshv1alpha1.MeshConfig{RootNamespace: "mesh-root"})
	if err != nil {
		t.Fatal(err)
	}
	if rj := view.Apply(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: protocol.MeshConfigTypeURL,
		Resources: []*discoveryv3.Resource{{Name: "m", Version: "1", Resource: body}}}); len(rj) > 0 {
		t.Fatal(rj)
	}
	s := New(Options{Mesh: "m", Cluster: "a", View: view, HubSynced: func() error { return nil }})
	if got := s.meshConfig("m").GetRootNamespace(); got != "mesh-root" {
		t.Fatalf("own mesh: root namespace %q, want mesh-root", got)
	}
	if got := s.meshConfig("other"); got != nil {
		t.Fatalf("another mesh: %v, want nil", got)
	}
}

// The engine's MeshNetworks are the remote view's, for the spoke's own
// mesh only; a view refuses networks that do not validate.
func TestFallbackMeshNetworksAreTheViewsForItsOwnMesh(t *testing.T) {
	view := remote.New("m", "a")
	s := New(Options{Mesh: "m", Cluster: "a", View: view, HubSynced: func() error { return nil }})
	if got := s.meshNetworks("m"); got != nil {
		t.Fatalf("before the hub gave any: %v, want nil", got)
	}
	apply := func(nw *meshv1alpha1.MeshNetworks) []*protocolv1.Rejection {
		body, err := anypb.New(nw)
		if err != nil {
			t.Fatal(err)
		}
		return view.Apply(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: protocol.MeshNetworksTypeURL,
			Resources: []*discoveryv3.Resource{{Name: "m", Version: "1", Resource: body}}})
	}
	gw := func(port uint32) *meshv1alpha1.MeshNetworks {
		return &meshv1alpha1.MeshNetworks{Networks: map[string]*meshv1alpha1.Network{"net2": {Gateways: []*meshv1alpha1.Network_IstioNetworkGateway{
			{Gw: &meshv1alpha1.Network_IstioNetworkGateway_Address{Address: "192.0.2.7"}, Port: port}}}}}
	}
	if rj := apply(gw(15443)); len(rj) > 0 {
		t.Fatal(rj)
	}
	if got := s.meshNetworks("m").GetNetworks()["net2"].GetGateways()[0].GetAddress(); got != "192.0.2.7" {
		t.Fatalf("own mesh: gateway %q, want 192.0.2.7", got)
	}
	if got := s.meshNetworks("other"); got != nil {
		t.Fatalf("another mesh: %v, want nil", got)
	}
	if rj := apply(gw(0)); len(rj) != 1 || !strings.Contains(rj[0].GetReason(), "gateways[0].port") {
		t.Fatalf("a gateway without a port: rejections %v, want one naming the port", rj)
	}
	if got := s.meshNetworks("m").GetNetworks()["net2"].GetGateways()[0].GetPort(); got != 15443 {
		t.Fatalf("a refused update replaced the networks: port %d", got)
	}
}
