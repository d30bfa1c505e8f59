package ra

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	issued   prometheus.Counter
	refusals *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		issued: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_spoke_ra_certificates_total",
			Help: "Workload certificates the hub issued through the spoke's registration authority."}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_spoke_ra_refusals_total",
			Help: "Workload certificate requests the spoke's registration authority refused, by reason (missing_token, malformed_token, invalid_token, wrong_audience, not_service_account, review_unavailable, invalid_csr, identity_mismatch, hub_error)."},
			[]string{"reason"}),
	}
	for _, r := range Reasons {
		m.refusals.WithLabelValues(string(r))
	}
	if reg != nil {
		reg.MustRegister(m.issued, m.refusals)
	}
	return m
}

func (m *metrics) refused(r Reason) { m.refusals.WithLabelValues(string(r)).Inc() }
