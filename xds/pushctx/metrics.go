package pushctx

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/navemesh/nave/xds/mesh"
)

type metrics struct {
	builds       prometheus.Counter
	failures     prometheus.Counter
	buildSeconds prometheus.Histogram
	services     *prometheus.GaugeVec
	conflicts    *prometheus.GaugeVec
	fastBuilds   prometheus.Counter
	skipped      prometheus.Counter
	unchanged    prometheus.Counter
	unreachable  *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		builds: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_pushctx_builds_total",
			Help: "Push contexts built and published."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_pushctx_build_failures_total",
			Help: "Push context builds that failed (a panic, logged); the mesh kept its previous push context."}),
		buildSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "nave_pushctx_build_duration_seconds",
			Help: "Time to merge one mesh's clusters into a push context and publish it (generation for proxies happens on first use, see nave_proxy_generate_duration_seconds).", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		services: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nave_mesh_services",
			Help: "Services in the mesh's current push context."}, []string{"mesh"}),
		conflicts: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nave_mesh_config_conflicts",
			Help: "Config objects in the mesh's current push context that lost to another cluster's different definition of the same kind/namespace/name (listed at /debug/meshes)."}, []string{"mesh"}),
		fastBuilds: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_pushctx_endpoint_builds_total",
			Help: "Push context builds started at once for endpoint-only changes (no debounce)."}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_pushctx_builds_deferred_total",
			Help: "Builds skipped because no proxy stream watches the mesh (push.adaptive); the mesh is built when one connects."}),
		unchanged: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_pushctx_builds_unchanged_total",
			Help: "Builds that found nothing new (the change was taken along by the build before) and published nothing."}),
		unreachable: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nave_mesh_unreachable_endpoints",
			Help: "Endpoints of the network that proxies on other networks cannot reach: the mesh has several networks and this one has no east-west gateway (listed at /debug/meshes; docs/multi-network.md)."}, []string{"mesh", "network"}),
	}
	if reg != nil {
		reg.MustRegister(m.builds, m.failures, m.buildSeconds, m.services, m.conflicts, m.fastBuilds, m.skipped, m.unchanged, m.unreachable)
	}
	return m
}

// reportNetworks sets the unreachable endpoints of each network of snap
// and removes the series of networks in last it no longer has; it
// returns snap's networks.
func (m *metrics) reportNetworks(meshName string, snap *mesh.Snapshot, last []string) []string {
	var names []string
	for _, n := range snap.Networks() {
		names = append(names, n.Network)
		m.unreachable.WithLabelValues(meshName, n.Network).Set(float64(n.Unreachable))
	}
	for _, n := range last {
		if !slices.Contains(names, n) {
			m.unreachable.DeleteLabelValues(meshName, n)
		}
	}
	return names
}
