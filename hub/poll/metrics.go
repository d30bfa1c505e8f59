package poll

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	dials    *prometheus.CounterVec
	failures *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, count func() map[string]int) *metrics {
	m := &metrics{
		dials: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_hub_poll_dials_total",
			Help: "Attempts to dial a polled spoke and open its Poll stream."}, []string{"mesh", "cluster"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_hub_poll_dial_failures_total",
			Help: "Attempts to poll a spoke that ended before the stream was admitted: unreachable, TLS refused either way, or the spoke's identity refused."}, []string{"mesh", "cluster"}),
	}
	if reg == nil {
		return m
	}
	reg.MustRegister(m.dials, m.failures)
	for _, s := range states {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "nave_hub_poll_targets",
			Help:        "Polled spokes (spokes.poll) by state: connecting, streaming, backoff, not-owner (another replica dials it).",
			ConstLabels: prometheus.Labels{"state": s}}, func() float64 { return float64(count()[s]) }))
	}
	return m
}
