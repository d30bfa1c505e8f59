package gatewaycert

import "github.com/prometheus/client_golang/prometheus"

// Reason classifies why a requested name was not served. The set is
// closed: it is the label set of
// nave_spoke_gateway_credential_refusals_total. A plain value.
type Reason string

const (
	// ReasonUnauthenticated: the stream's token was not a workload's
	// (the registration authority's TokenReview refused it).
	ReasonUnauthenticated Reason = "unauthenticated"
	// ReasonBadName: the name is not a Secret's (another scheme, a
	// missing namespace).
	ReasonBadName Reason = "bad_name"
	// ReasonNotFound: no such Secret in the gateway's cluster.
	ReasonNotFound Reason = "not_found"
	// ReasonWrongShape: the Secret holds no certificate and key (or CA
	// bundle) Istio accepts, or they do not parse or make a pair.
	ReasonWrongShape Reason = "wrong_shape"
	// ReasonUnauthorized: the gateway's service account may not list
	// Secrets in its namespace (Istio's check), or the name is a
	// kubernetes:// Secret of another namespace.
	ReasonUnauthorized Reason = "unauthorized"
	// ReasonNoReferenceGrant: a kubernetes-gateway:// Secret of another
	// namespace that no ReferenceGrant there allows to Gateways of the
	// gateway's namespace.
	ReasonNoReferenceGrant Reason = "no_reference_grant"
	// ReasonAPIError: the API server could not answer (a watch or an
	// access review failed).
	ReasonAPIError Reason = "api_error"
)

// Reasons lists every Reason.
var Reasons = []Reason{ReasonUnauthenticated, ReasonBadName, ReasonNotFound, ReasonWrongShape, ReasonUnauthorized,
	ReasonNoReferenceGrant, ReasonAPIError}

type metrics struct {
	refusals *prometheus.CounterVec
	watched  prometheus.Gauge
	streams  prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_spoke_gateway_credential_refusals_total",
			Help: "Gateway credentialName secrets the spoke refused to serve to a gateway's agent, by reason (unauthenticated, bad_name, not_found, wrong_shape, unauthorized, no_reference_grant, api_error); counted once per stream, name and reason."},
			[]string{"reason"}),
		watched: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nave_spoke_gateway_credential_secrets_watched",
			Help: "Secrets the spoke watches because a gateway's agent asked for them (one single-object watch each)."}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nave_spoke_gateway_credential_streams",
			Help: "Open streams of gateways' agents asking the spoke for credentialName secrets."}),
	}
	for _, r := range Reasons {
		m.refusals.WithLabelValues(string(r))
	}
	if reg != nil {
		reg.MustRegister(m.refusals, m.watched, m.streams)
	}
	return m
}
