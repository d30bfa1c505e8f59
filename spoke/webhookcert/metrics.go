package webhookcert

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	issued        prometheus.Counter
	expiry        prometheus.Gauge
	casCreated    prometheus.Counter
	bundleUpdates prometheus.Counter
	errors        prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		issued: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_spoke_webhook_certificates_issued_total",
			Help: "Serving certificates this spoke issued itself for its webhook listener."}),
		expiry: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nave_spoke_webhook_certificate_expiry_timestamp_seconds",
			Help: "When the webhook serving certificate expires (Unix time); it is renewed half way."}),
		casCreated: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_spoke_webhook_cas_created_total",
			Help: "Webhook CAs this spoke created in the CA Secret: the first one, and successors when one is half way."}),
		bundleUpdates: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_spoke_webhook_cabundle_updates_total",
			Help: "Updates this spoke made to the caBundle of its webhook configurations."}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_spoke_webhook_certificate_errors_total",
			Help: "Failed passes of the webhook certificate management (API errors, missing permissions); each is retried."}),
	}
	if reg != nil {
		reg.MustRegister(m.issued, m.expiry, m.casCreated, m.bundleUpdates, m.errors)
	}
	return m
}
