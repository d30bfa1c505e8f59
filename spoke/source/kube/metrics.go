package kube

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/navemesh/nave/shared/meshconfig"
)

type metrics struct {
	objects       *prometheus.GaugeVec
	invalid       *prometheus.GaugeVec
	events        *prometheus.CounterVec
	publishes     prometheus.Counter
	notSynced     prometheus.Gauge
	buildDuration prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		objects: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nave_spoke_kube_objects",
			Help: "Objects of the last publish from the Kubernetes source, by config kind (Service, Workload, VirtualService, ...).",
		}, []string{"kind"}),
		invalid: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nave_spoke_kube_invalid_objects",
			Help: "Objects the last build of the Kubernetes source skipped as invalid, by config kind (and the Gateway API kinds nave does not support, BackendTLSPolicy, ListenerSet, UDPRoute: all their objects).",
		}, []string{"kind"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nave_spoke_kube_events_total",
			Help: "Informer events (add, update, delete) received, by watched Kubernetes kind.",
		}, []string{"kind"}),
		publishes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nave_spoke_kube_publishes_total",
			Help: "Complete object sets published by the Kubernetes source.",
		}),
		notSynced: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nave_spoke_kube_kinds_not_synced",
			Help: "Watched Kubernetes kinds whose informer has not synced: waiting, forbidden, or CRD not installed.",
		}),
		buildDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "nave_spoke_kube_build_duration_seconds",
			Help:    "Time to normalize the informer caches into the object set.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8),
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.objects, m.invalid, m.events, m.publishes, m.notSynced, m.buildDuration} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return m, nil
}

// observe records the counts of one build, zero for the kinds it lacks.
func (m *metrics) observe(objs []*meshconfig.Object, invalid map[string]int, seconds float64) {
	counts := map[string]int{}
	for _, k := range meshconfig.Kinds() {
		counts[k.Kind] = 0
	}
	for _, d := range kindDefs {
		if d.unsupported != "" {
			counts[d.name] = 0 // its objects are all invalid
		}
	}
	for _, o := range objs {
		counts[o.Kind.Kind]++
	}
	for kind, n := range counts {
		m.objects.WithLabelValues(kind).Set(float64(n))
		m.invalid.WithLabelValues(kind).Set(float64(invalid[kind]))
	}
	m.buildDuration.Observe(seconds)
}
