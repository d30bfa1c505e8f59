package cache

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	problems *prometheus.GaugeVec
	// proxyGenSeconds times Envoy generation for one proxy key.
	proxyGenSeconds prometheus.Histogram
	generations     *prometheus.CounterVec
	mismatches      prometheus.Counter
	genWaiting      prometheus.GaugeFunc
	// patchFailures counts EnvoyFilter patches that failed on a resource.
	patchFailures prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, waiting func() float64) *metrics {
	m := &metrics{
		problems: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nave_mesh_config_problems",
			Help: "Distinct config problems (config that could not be applied as written) in the mesh's current push context, including those found generating for proxies (listed at /debug/meshes)."}, []string{"mesh"}),
		proxyGenSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "nave_proxy_generate_duration_seconds",
			Help:    "Time to generate and marshal the resources of one Envoy proxy key (sidecar or gateway) from a push context.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18)}),
		generations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_proxy_generations_total",
			Help: "Envoy proxy-key generations by mode: full (from scratch), endpoints (only changed services' endpoints regenerated, the rest reused), rules (only what changed DestinationRules or VirtualServices reach regenerated: the rules' hosts' clusters and assignments, routes, listeners when they read them), reused (nothing changed)."}, []string{"mode"}),
		mismatches: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_proxy_generation_mismatches_total",
			Help: "Incremental generations that differed from generation from scratch (only counted with push.verifyIncremental): a reuse rule misses an input."}),
		genWaiting: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "nave_proxy_generations_waiting",
			Help: "Generations (proxy keys, proxyless outputs) waiting for one of push.maxConcurrentGenerations slots (served round robin across meshes)."}, waiting),
		patchFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_envoyfilter_patch_failures_total",
			Help: "EnvoyFilter patches that failed on a generated resource (a merge of mismatched types, a panic): the resource was sent as generated; the reason is a config problem of the EnvoyFilter (/debug/meshes)."}),
	}
	if reg != nil {
		reg.MustRegister(m.problems, m.proxyGenSeconds, m.generations, m.mismatches, m.genWaiting, m.patchFailures)
	}
	return m
}
