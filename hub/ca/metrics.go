package ca

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/navemesh/nave/shared/certreq"
)

// metrics are the CA's Prometheus metrics. They are shared by the
// Authority (signing) and its Servers (authorization).
type metrics struct {
	issued   prometheus.Counter
	refusals *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		issued: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_hub_ca_certificates_issued_total",
			Help: "Certificates the hub's CA issued."}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_hub_ca_refusals_total",
			Help: "Certificate requests the hub's CA refused, by reason (invalid_request, invalid_csr, key_not_allowed, identity_not_allowed, unauthenticated, unknown_mesh)."},
			[]string{"reason"}),
	}
	for _, r := range certreq.Reasons {
		m.refusals.WithLabelValues(string(r)) // export every reason from the start, at 0
	}
	if reg != nil {
		reg.MustRegister(m.issued, m.refusals)
	}
	return m
}

func (m *metrics) refused(r certreq.Reason) { m.refusals.WithLabelValues(string(r)).Inc() }
