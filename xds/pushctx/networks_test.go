package pushctx_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/navemesh/nave/internal/metrictest"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/xds/pushctx"
	"github.com/navemesh/nave/xds/pushctx/pushctxtest"
)

// TestEndpointMovesOntoNetworksAreReported: endpoint builds of a mesh
// without networks skip counting its networks, yet endpoints that move
// onto networks are reported (two networks, no gateway: each one's
// endpoints unreachable from the other), and so is their leaving.
func TestEndpointMovesOntoNetworksAreReported(t *testing.T) {
	se := pushctxtest.Decode(t, `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: shop}
spec:
  hosts: [db.shop.svc.cluster.local]
  resolution: STATIC
  ports: [{number: 5432, name: pg, protocol: TCP}]
  workloadSelector: {labels: {app: db}}
`)
	entry := func(name, addr, network string) *meshconfig.Object {
		net := ""
		if network != "" {
			net = ", network: " + network
		}
		return pushctxtest.Decode(t, fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: %s, namespace: shop}\nspec: {address: %s, labels: {app: db}%s}\n", name, addr, net))[0]
	}
	a, b := entry("a", "10.0.0.1", ""), entry("b", "10.0.0.2", "")
	src := pushctxtest.NewSource()
	set := func() {
		src.Set("m", pushctxtest.Cluster("c1", true, append(append(se[:len(se):len(se)], a), b)))
	}
	set()
	reg := prometheus.NewRegistry()
	synctest.Test(t, func(t *testing.T) {
		m := pushctx.New(src, pushctx.Options{DebounceQuiet: time.Hour, DebounceMax: time.Hour, Registerer: reg})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		m.Start(ctx)
		unreachable := func(network string) float64 {
			return metrictest.Value(t, reg, "nave_mesh_unreachable_endpoints", "mesh", "m", "network", network)
		}
		publish := func(first bool) {
			t.Helper()
			_, changed := m.Current("m")
			set()
			m.NotifyEndpoints("m")
			synctest.Wait()
			if !pushctxtest.Closed(changed) {
				t.Fatal("an endpoint change was not published at once")
			}
			if st, _ := m.Current("m"); !first && st.Diff.Config {
				t.Fatal("the change was not endpoint-only")
			}
		}
		publish(true) // the first State: no networks
		a, b = entry("a", "10.0.0.1", "net-a"), entry("b", "10.0.0.2", "net-b")
		publish(false)
		if ua, ub := unreachable("net-a"), unreachable("net-b"); ua != 1 || ub != 1 {
			t.Errorf("after the moves onto networks: net-a %v, net-b %v unreachable, want 1 and 1", ua, ub)
		}
		a, b = entry("a", "10.0.0.1", ""), entry("b", "10.0.0.2", "")
		publish(false)
		if ua, ub := unreachable("net-a"), unreachable("net-b"); ua != 0 || ub != 0 {
			t.Errorf("after the moves off the networks: net-a %v, net-b %v unreachable, want no series", ua, ub)
		}
	})
}
