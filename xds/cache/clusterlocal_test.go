package cache_test

import (
	"context"
	"slices"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/navemesh/nave/shared/typeurl"
	"github.com/navemesh/nave/xds/cache"
	"github.com/navemesh/nave/xds/engine"
	"github.com/navemesh/nave/xds/proxy"
	"github.com/navemesh/nave/xds/pushctx"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
	"github.com/navemesh/nave/xds/resource"
)

// TestClusterLocalHostsSplitKeysByCluster: proxies of two clusters share
// one generation while no host is cluster-local; once the MeshConfig
// (pushctx.Options.MeshConfig) makes one so, each gets its own cluster's
// endpoints of it, Envoy and proxyless alike, and what is shared still
// equals generation from scratch.
func TestClusterLocalHostsSplitKeysByCluster(t *testing.T) {
	entry := func(addr string) string {
		return `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db-` + addr + `, namespace: demo}
spec:
  hosts: [db.demo.svc.cluster.local]
  location: MESH_INTERNAL
  ports: [{number: 5432, name: tcp, protocol: TCP}]
  resolution: STATIC
  endpoints:
  - {address: ` + addr + `}
`
	}
	for _, c := range []struct {
		name  string
		cfg   *meshv1alpha1.MeshConfig
		local bool
	}{
		{"no MeshConfig", nil, false},
		{"db is cluster-local", &meshv1alpha1.MeshConfig{ServiceSettings: []*meshv1alpha1.MeshConfig_ServiceSettings{{
			Settings: &meshv1alpha1.MeshConfig_ServiceSettings_Settings{ClusterLocal: true}, Hosts: []string{"db.demo.svc.cluster.local"}}}}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := pushctxtest.NewSource()
			src.Set("m", pushctxtest.Cluster("c1", true, pushctxtest.Decode(t, entry("10.1.0.1"))),
				pushctxtest.Cluster("c2", true, pushctxtest.Decode(t, entry("10.2.0.1"))))
			eng := engine.New(src, engine.Options{
				Push: pushctx.Options{DebounceQuiet: time.Millisecond, DebounceMax: 10 * time.Millisecond,
					MeshConfig: func(string) *meshv1alpha1.MeshConfig { return c.cfg }},
				Cache: cache.Options{Verify: true},
			})
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			eng.Start(ctx)
			_, ready := eng.Publisher().Current("m")
			eng.Notify("m")
			pushctxtest.Await(t, ready, "the mesh is published")
			st := current(eng.Cache(), eng.Publisher(), "m")
			key := func(typ proxy.Type, cluster string) proxy.Key {
				return proxy.Key{Type: typ, Mesh: "m", Namespace: "demo", Cluster: cluster}
			}
			const cla = "outbound|5432||db.demo.svc.cluster.local"
			for _, typ := range []proxy.Type{proxy.Sidecar, proxy.GRPC} {
				get := func(cluster string) *resource.ProxyResources {
					if typ == proxy.GRPC {
						return st.ProxylessFor(key(typ, cluster))
					}
					return st.ForProxy(key(typ, cluster))
				}
				c1, c2 := get("c1"), get("c2")
				if shared := c1 == c2; shared == c.local {
					t.Errorf("%s: proxies of c1 and c2 share a generation: %v", typ, shared)
				}
				want1, want2 := []string{"10.1.0.1", "10.2.0.1"}, []string{"10.1.0.1", "10.2.0.1"}
				if c.local {
					want1, want2 = []string{"10.1.0.1"}, []string{"10.2.0.1"}
				}
				if got := addressesOf(t, c1, cla); !slices.Equal(got, want1) {
					t.Errorf("%s of c1: endpoints %v, want %v", typ, got, want1)
				}
				if got := addressesOf(t, c2, cla); !slices.Equal(got, want2) {
					t.Errorf("%s of c2: endpoints %v, want %v", typ, got, want2)
				}
			}
			// An endpoint-only change in c2 (generated incrementally) keeps
			// the split.
			_, next := eng.Publisher().Current("m")
			src.Set("m", pushctxtest.Cluster("c1", true, pushctxtest.Decode(t, entry("10.1.0.1"))),
				pushctxtest.Cluster("c2", true, pushctxtest.Decode(t, entry("10.2.0.1")+"  - {address: 10.2.0.2}\n")))
			eng.NotifyEndpoints("m")
			pushctxtest.Await(t, next, "the endpoint change is published")
			st = current(eng.Cache(), eng.Publisher(), "m")
			got1, got2 := addressesOf(t, st.ForProxy(key(proxy.Sidecar, "c1")), cla), addressesOf(t, st.ForProxy(key(proxy.Sidecar, "c2")), cla)
			if c.local && (!slices.Equal(got1, []string{"10.1.0.1"}) || !slices.Equal(got2, []string{"10.2.0.1", "10.2.0.2"})) {
				t.Errorf("after c2's endpoint change: c1 gets %v, c2 %v", got1, got2)
			}
			if mm := eng.Cache().Mismatches(); len(mm) > 0 {
				t.Errorf("shared results differ from generation from scratch: %v", mm)
			}
		})
	}
}

func addressesOf(t *testing.T, r *resource.ProxyResources, name string) []string {
	t.Helper()
	p := r.Resources[typeurl.Endpoint][name]
	if p == nil {
		t.Fatalf("no assignment %s", name)
	}
	cla := &endpointv3.ClusterLoadAssignment{}
	if err := proto.Unmarshal(p.Any.GetValue(), cla); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range cla.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			out = append(out, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
		}
	}
	slices.Sort(out)
	return out
}
