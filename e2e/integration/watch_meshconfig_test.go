package integration

import (
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/navemesh/nave/hub/ingest"
	"github.com/navemesh/nave/hub/watch"
	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/protocol"
	protocolv1 "github.com/navemesh/nave/protocol/v1"
	"github.com/navemesh/nave/spoke/remote"
	"github.com/navemesh/nave/spoke/uplink"
)

// meshConfigHub is a hub's ingest and Watch servers serving each mesh's
// MeshConfig from configs and MeshNetworks from networks; its Watch
// refuses the types refused names as a hub from before them does.
type meshConfigHub struct {
	w    *watch.Server
	addr string

	mu       sync.Mutex
	configs  map[string]*meshv1alpha1.MeshConfig
	networks map[string]*meshv1alpha1.MeshNetworks
}

func newMeshConfigHub(t *testing.T, refused ...string) *meshConfigHub {
	t.Helper()
	h := &meshConfigHub{configs: map[string]*meshv1alpha1.MeshConfig{}, networks: map[string]*meshv1alpha1.MeshNetworks{}}
	in := newHubIngest(ingest.StoreOptions{StaleGracePeriod: time.Minute,
		OnChange: func(m string, _ bool) { h.w.Notify(m) }}, ingest.ServerOptions{
		Watch: func(id ingest.ClusterIdentity, s protocolv1.Sync_WatchServer) error {
			if len(refused) > 0 {
				s = oldHubWatch{s, refused}
			}
			return h.w.Serve(id.Mesh, id.Cluster, s)
		}})
	h.w = watch.New(in, watch.Options{Debounce: 10 * time.Millisecond, Ready: in.Ready,
		MeshConfig: func(m string) *meshv1alpha1.MeshConfig {
			h.mu.Lock()
			defer h.mu.Unlock()
			return h.configs[m]
		},
		MeshNetworks: func(m string) *meshv1alpha1.MeshNetworks {
			h.mu.Lock()
			defer h.mu.Unlock()
			return h.networks[m]
		}})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	protocolv1.RegisterSyncServer(srv, in.srv)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	h.addr = lis.Addr().String()
	return h
}

func (h *meshConfigHub) set(mesh string, cfg *meshv1alpha1.MeshConfig) {
	h.mu.Lock()
	h.configs[mesh] = cfg
	h.mu.Unlock()
	h.w.MeshConfigChanged(mesh)
}

// setNetworks gives mesh networks, as an update of its Mesh document does.
func (h *meshConfigHub) setNetworks(mesh string, nw *meshv1alpha1.MeshNetworks) {
	h.mu.Lock()
	h.networks[mesh] = nw
	h.mu.Unlock()
	h.w.MeshConfigChanged(mesh)
}

// oldHubWatch answers a subscription to one of the refused types as a hub
// that does not know it: the stream ends with InvalidArgument naming it.
type oldHubWatch struct {
	protocolv1.Sync_WatchServer
	refused []string
}

func (o oldHubWatch) Recv() (*discoveryv3.DeltaDiscoveryRequest, error) {
	r, err := o.Sync_WatchServer.Recv()
	if err == nil && slices.Contains(o.refused, r.GetTypeUrl()) {
		return nil, status.Errorf(codes.InvalidArgument, "watch: type URL %q is not served on Watch", r.GetTypeUrl())
	}
	return r, err
}

// A spoke that injects without a fallback watches its mesh's MeshConfig
// alone; a change on the hub reaches it, and it is saved with the view.
func TestUplinkWatchesTheMeshConfig(t *testing.T) {
	h := newMeshConfigHub(t)
	h.set("m", &meshv1alpha1.MeshConfig{RootNamespace: "first"})
	h.set("other", &meshv1alpha1.MeshConfig{RootNamespace: "other-mesh"})
	runUplink(t, uplink.Options{Address: h.addr, Mesh: "m", Cluster: "c2"}, serviceEntries(t, 3))
	view := remote.New("m", "c1")
	file := filepath.Join(t.TempDir(), remote.File)
	up := runUplink(t, uplink.Options{Address: h.addr, Mesh: "m", Cluster: "c1", View: view, ViewFile: file, NoRemoteConfig: true},
		serviceEntries(t, 1))
	testwait.For(t, waitFor, func() error {
		if st := up.Status(); st.Watch != uplink.WatchSynced {
			return fmt.Errorf("watch is %s (%s)", st.Watch, st.WatchLastErr)
		}
		if got := view.MeshConfig().GetRootNamespace(); got != "first" {
			return fmt.Errorf("mesh config root namespace %q", got)
		}
		return nil
	})
	if cs := view.Clusters(); len(cs) != 0 {
		t.Fatalf("a mesh-config-only view holds clusters: %+v", view.Status())
	}

	h.set("m", &meshv1alpha1.MeshConfig{RootNamespace: "second"})
	testwait.For(t, waitFor, func() error {
		if got := view.MeshConfig().GetRootNamespace(); got != "second" {
			return fmt.Errorf("mesh config root namespace %q", got)
		}
		loaded := remote.New("m", "c1")
		if err := loaded.Load(file); err != nil {
			return err
		}
		if got := loaded.MeshConfig().GetRootNamespace(); got != "second" {
			return fmt.Errorf("saved mesh config root namespace %q", got)
		}
		return nil
	})
}

// A hub from before the MeshConfig type refuses its subscription; the
// spoke watches the rest without it.
func TestUplinkWatchesAnOlderHubWithoutTheMeshConfig(t *testing.T) {
	h := newMeshConfigHub(t, protocol.MeshConfigTypeURL, protocol.MeshNetworksTypeURL)
	h.set("m", &meshv1alpha1.MeshConfig{RootNamespace: "never-sent"})
	runUplink(t, uplink.Options{Address: h.addr, Mesh: "m", Cluster: "c2"}, serviceEntries(t, 3))
	view := remote.New("m", "c1")
	up := runUplink(t, uplink.Options{Address: h.addr, Mesh: "m", Cluster: "c1", View: view}, serviceEntries(t, 1))
	testwait.For(t, waitFor, func() error {
		if st := up.Status(); st.Watch != uplink.WatchSynced {
			return fmt.Errorf("watch is %s (%s)", st.Watch, st.WatchLastErr)
		}
		if cs := view.Clusters(); len(cs) != 1 || len(cs[0].Objects) != 3 {
			return fmt.Errorf("view = %+v", view.Status())
		}
		return nil
	})
	if view.MeshConfig() != nil {
		t.Fatalf("mesh config %v from a hub that refused the type", view.MeshConfig())
	}
}

// netsOf is a MeshNetworks with one network's gateway at address.
func netsOf(address string) *meshv1alpha1.MeshNetworks {
	return &meshv1alpha1.MeshNetworks{Networks: map[string]*meshv1alpha1.Network{"net-b": {Gateways: []*meshv1alpha1.Network_IstioNetworkGateway{
		{Gw: &meshv1alpha1.Network_IstioNetworkGateway_Address{Address: address}, Port: 15443}}}}}
}

// A spoke with a view watches its mesh's MeshNetworks beside the
// MeshConfig: a change on the hub (a new Mesh document) reaches it and is
// saved with the view; a spoke that only injects does not subscribe to
// them.
func TestUplinkWatchesTheMeshNetworks(t *testing.T) {
	h := newMeshConfigHub(t)
	h.setNetworks("m", netsOf("192.0.2.1"))
	h.setNetworks("other", netsOf("198.51.100.1"))
	runUplink(t, uplink.Options{Address: h.addr, Mesh: "m", Cluster: "c2"}, serviceEntries(t, 3))
	view := remote.New("m", "c1")
	file := filepath.Join(t.TempDir(), remote.File)
	runUplink(t, uplink.Options{Address: h.addr, Mesh: "m", Cluster: "c1", View: view, ViewFile: file}, serviceEntries(t, 1))
	gateway := func(nw *meshv1alpha1.MeshNetworks) string {
		if gws := nw.GetNetworks()["net-b"].GetGateways(); len(gws) > 0 {
			return gws[0].GetAddress()
		}
		return ""
	}
	testwait.For(t, waitFor, func() error {
		if got := gateway(view.MeshNetworks()); got != "192.0.2.1" {
			return fmt.Errorf("mesh networks' gateway %q", got)
		}
		return nil
	})
	h.setNetworks("m", netsOf("192.0.2.2"))
	testwait.For(t, waitFor, func() error {
		if got := gateway(view.MeshNetworks()); got != "192.0.2.2" {
			return fmt.Errorf("mesh networks' gateway %q", got)
		}
		loaded := remote.New("m", "c1")
		if err := loaded.Load(file); err != nil {
			return err
		}
		if got := gateway(loaded.MeshNetworks()); got != "192.0.2.2" {
			return fmt.Errorf("saved mesh networks' gateway %q", got)
		}
		return nil
	})

	injectOnly := remote.New("m", "c3")
	h.set("m", &meshv1alpha1.MeshConfig{RootNamespace: "r"})
	runUplink(t, uplink.Options{Address: h.addr, Mesh: "m", Cluster: "c3", View: injectOnly, NoRemoteConfig: true}, serviceEntries(t, 1))
	testwait.For(t, waitFor, func() error {
		if injectOnly.MeshConfig().GetRootNamespace() != "r" {
			return fmt.Errorf("the inject-only view holds no mesh config yet")
		}
		return nil
	})
	if nw := injectOnly.MeshNetworks(); nw != nil {
		t.Errorf("a spoke that only injects holds mesh networks %v", nw)
	}
}

// A hub from before the MeshNetworks type (which serves the MeshConfig)
// refuses its subscription; the spoke watches the rest, the MeshConfig
// included, without it.
func TestUplinkWatchesAnOlderHubWithoutTheMeshNetworks(t *testing.T) {
	h := newMeshConfigHub(t, protocol.MeshNetworksTypeURL)
	h.set("m", &meshv1alpha1.MeshConfig{RootNamespace: "kept"})
	h.setNetworks("m", netsOf("192.0.2.1"))
	runUplink(t, uplink.Options{Address: h.addr, Mesh: "m", Cluster: "c2"}, serviceEntries(t, 3))
	view := remote.New("m", "c1")
	up := runUplink(t, uplink.Options{Address: h.addr, Mesh: "m", Cluster: "c1", View: view}, serviceEntries(t, 1))
	testwait.For(t, waitFor, func() error {
		if st := up.Status(); st.Watch != uplink.WatchSynced {
			return fmt.Errorf("watch is %s (%s)", st.Watch, st.WatchLastErr)
		}
		if cs := view.Clusters(); len(cs) != 1 || len(cs[0].Objects) != 3 {
			return fmt.Errorf("view = %+v", view.Status())
		}
		if view.MeshConfig().GetRootNamespace() != "kept" {
			return fmt.Errorf("no mesh config yet")
		}
		return nil
	})
	if nw := view.MeshNetworks(); nw != nil {
		t.Fatalf("mesh networks %v from a hub that refused the type", nw)
	}
}
