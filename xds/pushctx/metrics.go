package pushctx

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	builds       prometheus.Counter
	failures     prometheus.Counter
	buildSeconds prometheus.Histogram
	services     *prometheus.GaugeVec
	conflicts    *prometheus.GaugeVec
	problems     *prometheus.GaugeVec
	// proxyGenSeconds times Envoy generation for one proxy key.
	proxyGenSeconds prometheus.Histogram
	generations     *prometheus.CounterVec
	fastBuilds      prometheus.Counter
	skipped         prometheus.Counter
	mismatches      prometheus.Counter
	genWaiting      prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		builds: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_hub_pushctx_builds_total",
			Help: "Push contexts built and published."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_hub_pushctx_build_failures_total",
			Help: "Push context builds that failed (a panic, logged); the mesh kept its previous push context."}),
		buildSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "nave_hub_pushctx_build_duration_seconds",
			Help: "Time to merge one mesh's clusters into a push context and publish it (generation for proxies happens on first use, see nave_hub_proxy_generate_duration_seconds).", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		services: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nave_hub_mesh_services",
			Help: "Services in the mesh's current push context."}, []string{"mesh"}),
		conflicts: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nave_hub_mesh_config_conflicts",
			Help: "Config objects in the mesh's current push context that lost to another cluster's different definition of the same kind/namespace/name (listed at /debug/meshes)."}, []string{"mesh"}),
		problems: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nave_hub_mesh_config_problems",
			Help: "Distinct config problems (config that could not be applied as written) in the mesh's current push context, including those found generating for proxies (listed at /debug/meshes)."}, []string{"mesh"}),
		proxyGenSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "nave_hub_proxy_generate_duration_seconds",
			Help:    "Time to generate and marshal the resources of one Envoy proxy key (sidecar or gateway) from a push context.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18)}),
		generations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_hub_proxy_generations_total",
			Help: "Envoy proxy-key generations by mode: full (from scratch), endpoints (only changed services' endpoints regenerated, the rest reused), reused (nothing changed)."}, []string{"mode"}),
		fastBuilds: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_hub_pushctx_endpoint_builds_total",
			Help: "Push context builds started at once for endpoint-only changes (no debounce)."}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_hub_pushctx_builds_deferred_total",
			Help: "Builds skipped because no proxy stream watches the mesh (push.adaptive); the mesh is built when one connects."}),
		mismatches: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_hub_proxy_generation_mismatches_total",
			Help: "Incremental generations that differed from generation from scratch (only counted with push.verifyIncremental): a reuse rule misses an input."}),
		genWaiting: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nave_hub_proxy_generations_waiting",
			Help: "Generations (proxy keys, proxyless outputs) waiting for one of push.maxConcurrentGenerations slots."}),
	}
	if reg != nil {
		reg.MustRegister(m.builds, m.failures, m.buildSeconds, m.services, m.proxyGenSeconds, m.conflicts, m.problems, m.generations, m.mismatches, m.fastBuilds, m.skipped, m.genWaiting)
	}
	return m
}
