package pushctx_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/navemesh/nave/internal/metrictest"
	"github.com/navemesh/nave/shared/meshlimits"
	"github.com/navemesh/nave/xds/pushctx"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
)

// TestPushesPerSecondPacesAMeshAlone: a mesh limited to 2 builds a second
// whose endpoints change continuously is built once per 500 ms (the
// changes in between merged), counted as delayed, while another mesh's
// change is built at once (fake clock).
func TestPushesPerSecondPacesAMeshAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := pushctxtest.NewSource()
		src.Set("a", pushctxtest.Cluster("c1", true, pushctxtest.EchoConfig(t, 80, 20)))
		src.Set("b", pushctxtest.Cluster("c1", true, pushctxtest.EchoConfig(t, 80, 20)))
		reg := prometheus.NewRegistry()
		m := pushctx.New(src, pushctx.Options{DebounceQuiet: time.Millisecond, DebounceMax: time.Millisecond,
			PushesPerSecond: func(mesh string) float64 {
				if mesh == "a" {
					return 2
				}
				return 0
			},
			LimitMetrics: meshlimits.NewMetrics(reg)})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		m.Start(ctx)

		m.NotifyEndpoints("a")
		synctest.Wait()
		if n := src.Builds("a"); n != 1 {
			t.Fatalf("%d builds of a after its first change, want 1", n)
		}
		// A second second of changes every 10 ms: the pace allows one
		// build per 500 ms.
		for range 100 {
			time.Sleep(10 * time.Millisecond)
			m.NotifyEndpoints("a")
		}
		synctest.Wait()
		if n := src.Builds("a"); n < 2 || n > 3 {
			t.Fatalf("%d builds of a in its first second of changes at 2/s, want 2 or 3", n)
		}
		before := src.Builds("b")
		m.NotifyEndpoints("b")
		synctest.Wait()
		if n := src.Builds("b"); n != before+1 {
			t.Fatalf("b was not built at once while a waits for its pace: %d builds, want %d", n, before+1)
		}
		if n := refusals(t, reg, "a", meshlimits.PushesPerSecond); n < 1 {
			t.Errorf("a's delayed builds counted %v times, want at least once", n)
		}
		if n := refusals(t, reg, "b", meshlimits.PushesPerSecond); n != 0 {
			t.Errorf("b's builds counted as delayed %v times", n)
		}
	})
}

// refusals reads nave_mesh_limit_refusals_total{mesh,limit} from reg.
func refusals(t *testing.T, reg *prometheus.Registry, mesh, limit string) float64 {
	t.Helper()
	return metrictest.Value(t, reg, "nave_mesh_limit_refusals_total", "mesh", mesh, "limit", limit)
}
