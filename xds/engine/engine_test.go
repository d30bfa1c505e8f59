package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/navemesh/nave/internal/testwait"
	"github.com/navemesh/nave/xds/engine"
	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/pushctx"
)

type source struct{}

func (source) Clusters(m string) []mesh.ClusterInput {
	return []mesh.ClusterInput{{Name: "c1", Connected: true, Synced: true}}
}

// TestPublishedStatesReachTheCache: a State is in the cache, and the
// caller's own OnPublish has seen it, by the time the publisher announces
// it; the debug views read it.
func TestPublishedStatesReachTheCache(t *testing.T) {
	published := make(chan *pushctx.State, 4)
	eng := engine.New(source{}, engine.Options{Push: pushctx.Options{
		DebounceQuiet: time.Millisecond, DebounceMax: 10 * time.Millisecond,
		OnPublish: func(st *pushctx.State) { published <- st },
	}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	eng.Notify("m")
	eng.Start(ctx)

	var st *pushctx.State
	select {
	case st = <-published:
	case <-time.After(testwait.Timeout):
		t.Fatal("no State published")
	}
	cur, _ := eng.Publisher().Current("m")
	if cur != st {
		t.Fatalf("published %v, current %v", st, cur)
	}
	entries := eng.Cache().Entries()
	if len(entries) != 1 || entries[0].State != st {
		t.Fatalf("cache entries %v, want the published State's", entries)
	}
	all := func(string) bool { return true }
	if ms := eng.Meshes(all); len(ms) != 1 || ms[0].Mesh != "m" || ms[0].Version != st.Version || len(ms[0].Clusters) != 1 {
		t.Errorf("Meshes = %+v", ms)
	}
	if ms := eng.Meshes(func(string) bool { return false }); len(ms) != 0 {
		t.Errorf("Meshes of nothing visible = %+v", ms)
	}
	if _, err := eng.Services("other", all); err == nil {
		t.Error("Services of a mesh without a push context: no error")
	}
}
