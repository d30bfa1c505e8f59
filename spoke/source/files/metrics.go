package files

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/navemesh/nave/shared/meshconfig"
)

type metrics struct {
	objects       *prometheus.GaugeVec
	rejected      prometheus.Gauge
	rejections    prometheus.Counter
	loads         prometheus.Counter
	loadDurations prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		objects: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nave_spoke_config_objects",
			Help: "Valid config objects loaded from files, by kind.",
		}, []string{"kind"}),
		rejected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nave_spoke_config_rejected_objects",
			Help: "Config objects and files rejected by the last load.",
		}),
		rejections: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nave_spoke_config_rejections_total",
			Help: "Config objects and files rejected, counted at every load.",
		}),
		loads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nave_spoke_config_loads_total",
			Help: "Loads of the config directory.",
		}),
		loadDurations: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "nave_spoke_config_load_duration_seconds",
			Help:    "Time to load the config directory.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.objects, m.rejected, m.rejections, m.loads, m.loadDurations} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return m, nil
}

// observe records one completed load.
func (m *metrics) observe(objs []*meshconfig.Object, rejections int, seconds float64) {
	counts := map[string]int{}
	for _, k := range meshconfig.Kinds() {
		if !k.Registry {
			counts[k.Kind] = 0
		}
	}
	for _, o := range objs {
		counts[o.Kind.Kind]++
	}
	for kind, n := range counts {
		m.objects.WithLabelValues(kind).Set(float64(n))
	}
	m.rejected.Set(float64(rejections))
	m.rejections.Add(float64(rejections))
	m.loads.Inc()
	m.loadDurations.Observe(seconds)
}
