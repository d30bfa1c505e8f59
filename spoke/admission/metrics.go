package admission

import "github.com/prometheus/client_golang/prometheus"

// Results of a review, the values of the result label.
const (
	resultAllowed = "allowed"
	resultDenied  = "denied"
	resultError   = "error"
)

// badRequestReasons are the values of nave_spoke_webhook_bad_requests_total's reason.
var badRequestReasons = []string{"method", "content_type", "too_large", "read", "malformed"}

type metrics struct {
	reviews     *prometheus.CounterVec
	warnings    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	badRequests *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		reviews: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_spoke_webhook_reviews_total",
			Help: "Admission reviews the spoke's webhooks answered, by webhook and result (allowed, denied, error)."},
			[]string{"webhook", "result"}),
		warnings: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_spoke_webhook_warnings_total",
			Help: "Warnings the spoke's webhooks returned with admitted objects, by webhook."}, []string{"webhook"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "nave_spoke_webhook_review_duration_seconds",
			Help:    "Time from a review's arrival to its answer, by webhook.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}}, []string{"webhook"}),
		badRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_spoke_webhook_bad_requests_total",
			Help: "Requests to the webhook listener that were not an AdmissionReview it could answer, by reason (method, content_type, too_large, read, malformed)."},
			[]string{"reason"}),
	}
	for _, r := range badRequestReasons {
		m.badRequests.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.reviews, m.warnings, m.duration, m.badRequests)
	}
	return m
}

// init makes a webhook's series exist before its first review.
func (m *metrics) init(webhook string) {
	for _, r := range []string{resultAllowed, resultDenied, resultError} {
		m.reviews.WithLabelValues(webhook, r)
	}
	m.warnings.WithLabelValues(webhook)
	m.duration.WithLabelValues(webhook)
}
