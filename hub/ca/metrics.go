package ca

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/navemesh/nave/shared/certreq"
)

// metrics are the CA's Prometheus metrics. They are shared by the
// Authority (signing) and its Servers (authorization).
type metrics struct {
	issued          prometheus.Counter
	refusals        *prometheus.CounterVec
	roots           *prometheus.GaugeVec
	phase           *prometheus.GaugeVec
	prevValidUntil  *prometheus.GaugeVec
	refreshFailures prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		issued: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_hub_ca_certificates_issued_total",
			Help: "Certificates the hub's CA issued."}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_hub_ca_refusals_total",
			Help: "Certificate requests the hub's CA refused, by reason (invalid_request, invalid_csr, key_not_allowed, identity_not_allowed, unauthenticated, unknown_mesh)."},
			[]string{"reason"}),
		roots: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nave_hub_ca_roots",
			Help: "Roots in a mesh's trust bundle (2 during a root rotation)."}, []string{"mesh"}),
		phase: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nave_hub_ca_rotation_phase",
			Help: "Where a mesh's root rotation stands: 0 none, 1 new root added (old signs), 2 switched (new signs, old still trusted)."}, []string{"mesh"}),
		prevValidUntil: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nave_hub_ca_previous_root_valid_until_seconds",
			Help: "After a rotation's switch, when the last certificate of the previous root expires at the latest (Unix time); the previous root can be dropped then. 0 when there is none."}, []string{"mesh"}),
		refreshFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_hub_ca_refresh_failures_total",
			Help: "Reads of the CA store (every ca.refreshInterval) that failed or found a CA that does not load; the CA in use stays."}),
	}
	for _, r := range certreq.Reasons {
		m.refusals.WithLabelValues(string(r)) // export every reason from the start, at 0
	}
	if reg != nil {
		reg.MustRegister(m.issued, m.refusals, m.roots, m.phase, m.prevValidUntil, m.refreshFailures)
	}
	return m
}

func (m *metrics) refused(r certreq.Reason) { m.refusals.WithLabelValues(string(r)).Inc() }

// forget stops exporting the state of mesh's roots (its CA was dropped).
func (m *metrics) forget(mesh string) {
	m.roots.DeleteLabelValues(mesh)
	m.phase.DeleteLabelValues(mesh)
	m.prevValidUntil.DeleteLabelValues(mesh)
}

// setCA exports the state of c's roots.
func (m *metrics) setCA(c *meshCA, maxTTL time.Duration) {
	name := c.mesh.Name
	m.roots.WithLabelValues(name).Set(float64(len(c.rootCerts)))
	phase := 0.0
	switch c.rotation.phase() {
	case PhaseAdded:
		phase = 1
	case PhaseSwitched:
		phase = 2
	}
	m.phase.WithLabelValues(name).Set(phase)
	until := 0.0
	if s := c.status(maxTTL); !s.PreviousValidUntil.IsZero() {
		until = float64(s.PreviousValidUntil.Unix())
	}
	m.prevValidUntil.WithLabelValues(name).Set(until)
}
