package pushctx_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/navemesh/nave/xds/pushctx"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
)

// TestMeshConfigReachesTheSnapshot: Options.MeshConfig is read at each
// build (Options.TrustDomain too); a new MeshConfig and a Notify publish a State that carries it,
// with a config change, for that mesh only.
func TestMeshConfigReachesTheSnapshot(t *testing.T) {
	src := pushctxtest.NewSource()
	src.Set("m", pushctxtest.Cluster("c1", true, pushctxtest.EchoConfig(t, 80, 20)))
	src.Set("other", pushctxtest.Cluster("c1", true, pushctxtest.EchoConfig(t, 80, 20)))
	var cfg atomic.Pointer[meshv1alpha1.MeshConfig]
	cfg.Store(&meshv1alpha1.MeshConfig{RootNamespace: "first"})
	m := pushctx.New(src, pushctx.Options{DebounceQuiet: time.Millisecond, DebounceMax: 10 * time.Millisecond,
		MeshConfig: func(mesh string) *meshv1alpha1.MeshConfig {
			if mesh != "m" {
				return nil
			}
			return cfg.Load()
		},
		TrustDomain: func(mesh string) string { return mesh + ".example" }})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// Both meshes' first publications are awaited on channels taken
	// before they can happen.
	_, ready := m.Current("m")
	_, otherReady := m.Current("other")
	m.Start(ctx)
	m.Notify("m")
	m.Notify("other")
	pushctxtest.Await(t, ready, "mesh m is published")
	st, next := m.Current("m")
	if got := st.Snapshot.RootNamespace(); got != "first" {
		t.Fatalf("root namespace %q, want first", got)
	}
	if st.Snapshot.TrustDomain != "m.example" {
		t.Errorf("trust domain %q, want m.example (Options.TrustDomain)", st.Snapshot.TrustDomain)
	}
	pushctxtest.Await(t, otherReady, "mesh other is published")
	if o, _ := m.Current("other"); o.Snapshot.MeshConfig != nil || o.Snapshot.RootNamespace() != "istio-system" {
		t.Errorf("mesh other carries %v", o.Snapshot.MeshConfig)
	}
	cfg.Store(&meshv1alpha1.MeshConfig{RootNamespace: "second", TrustDomain: "set.example"})
	m.Notify("m")
	pushctxtest.Await(t, next, "the MeshConfig change is published")
	st, _ = m.Current("m")
	if st.Snapshot.RootNamespace() != "second" || !st.Diff.Config || st.Snapshot.TrustDomain != "set.example" {
		t.Errorf("after the change: root namespace %q, config change %v, trust domain %q (the MeshConfig's)", st.Snapshot.RootNamespace(), st.Diff.Config, st.Snapshot.TrustDomain)
	}
}
