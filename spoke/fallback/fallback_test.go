package fallback

import (
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/spoke/remote"
)

// The state machine: active only after After without the hub and with the
// local state in; back only after HandBackAfter of continuous health, so a
// hub that comes and goes does not make it flap.
func TestFallbackActivatesAfterAndHandsBackWithHysteresis(t *testing.T) {
	s := New(Options{Mesh: "m", Cluster: "a", After: 5 * time.Second, HandBackAfter: 30 * time.Second, HubSynced: func() error { return nil }})
	t0 := time.Now()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	s.step(at(0), true)
	s.step(at(time.Second), false) // hub lost at 1 s
	s.step(at(10*time.Second), false)
	if s.Active() {
		t.Fatal("active before the local state was in")
	}
	s.Update(nil)
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
	s.step(at(84*time.Second), false)
	if s.Active() {
		t.Fatal("active again before After")
	}
	s.step(at(85*time.Second), false)
	if !s.Active() {
		t.Fatal("not active again after After")
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
