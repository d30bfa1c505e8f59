package watch

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	streams   prometheus.Gauge
	responses prometheus.Counter
	resources prometheus.Counter
	answers   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		streams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nave_hub_watch_streams",
			Help: "Open spoke Watch streams."}),
		responses: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_hub_watch_responses_total",
			Help: "Watch responses sent to spokes."}),
		resources: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_hub_watch_resources_total",
			Help: "Resources sent (or removed) on Watch streams."}),
		answers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_hub_watch_answers_total",
			Help: "Spokes' answers to Watch responses, by result (ack, nack)."}, []string{"result"}),
	}
	m.answers.WithLabelValues("ack")
	m.answers.WithLabelValues("nack")
	if reg != nil {
		reg.MustRegister(m.streams, m.responses, m.resources, m.answers)
	}
	return m
}
