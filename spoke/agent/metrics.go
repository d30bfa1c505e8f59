package agent

import "github.com/prometheus/client_golang/prometheus"

// metrics are the agent's nave_agent_* metrics (docs/metrics.md).
type metrics struct {
	expiry     prometheus.Gauge
	renewals   prometheus.Counter
	failures   prometheus.Counter
	sdsPushes  prometheus.Counter
	sdsStreams prometheus.Gauge
}

// newMetrics registers the metrics with reg (nil: unregistered).
func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		expiry: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nave_agent_certificate_expiry_timestamp_seconds",
			Help: "when the workload certificate in place expires (Unix time)"}),
		renewals: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_agent_certificate_renewals_total",
			Help: "workload certificates obtained and put in place (the first one included)"}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_agent_certificate_failures_total",
			Help: "failed attempts to obtain or put in place a workload certificate (each is retried)"}),
		sdsPushes: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_agent_sds_pushes_total",
			Help: "SDS responses sent to Envoy"}),
		sdsStreams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nave_agent_sds_streams",
			Help: "open SDS streams"}),
	}
	if reg != nil {
		reg.MustRegister(m.expiry, m.renewals, m.failures, m.sdsPushes, m.sdsStreams)
	}
	return m
}
