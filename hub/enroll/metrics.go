package enroll

import "github.com/prometheus/client_golang/prometheus"

// Refusal reasons of the Enrollment service
// (nave_hub_enroll_refusals_total{reason}).
const (
	reasonMalformedToken  = "malformed_token"
	reasonUnknownToken    = "unknown_token"
	reasonInvalidToken    = "invalid_token"
	reasonUsedToken       = "used_token"
	reasonExpiredToken    = "expired_token"
	reasonRevoked         = "revoked"
	reasonNotHosted       = "mesh_not_hosted"
	reasonBadCSR          = "bad_csr"
	reasonUnauthenticated = "unauthenticated"
	reasonInternal        = "internal"
)

var enrollReasons = []string{reasonMalformedToken, reasonUnknownToken, reasonInvalidToken, reasonUsedToken,
	reasonExpiredToken, reasonRevoked, reasonNotHosted, reasonBadCSR, reasonUnauthenticated, reasonInternal}

// Refusal reasons of the CertAuthenticator
// (nave_hub_spoke_auth_refusals_total{reason}).
const (
	authNoCertificate      = "no_certificate"
	authBadIdentity        = "bad_identity"
	authUnknownTrustDomain = "unknown_trust_domain"
	authUntrusted          = "untrusted"
	authNotEnrolled        = "not_enrolled"
	authRevoked            = "revoked"
	authNotHosted          = "mesh_not_hosted"
	authInternal           = "internal"
)

var authReasons = []string{authNoCertificate, authBadIdentity, authUnknownTrustDomain, authUntrusted,
	authNotEnrolled, authRevoked, authNotHosted, authInternal}

// counterVec returns a counter vector with every reason present at 0, so
// that a dashboard sees the closed set before the first refusal.
func counterVec(name, help string, reasons []string) *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"reason"})
	for _, r := range reasons {
		v.WithLabelValues(r)
	}
	return v
}

type serverMetrics struct {
	enrollments prometheus.Counter
	renewals    prometheus.Counter
	refusals    *prometheus.CounterVec
}

func newServerMetrics(reg prometheus.Registerer) *serverMetrics {
	m := &serverMetrics{
		enrollments: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_hub_enroll_enrollments_total",
			Help: "Clusters enrolled with a join token."}),
		renewals: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_hub_enroll_renewals_total",
			Help: "Cluster certificates renewed."}),
		refusals: counterVec("nave_hub_enroll_refusals_total",
			"Enroll and Renew calls refused, by reason.", enrollReasons),
	}
	if reg != nil {
		reg.MustRegister(m.enrollments, m.renewals, m.refusals)
	}
	return m
}

func newAuthMetrics(reg prometheus.Registerer) *prometheus.CounterVec {
	v := counterVec("nave_hub_spoke_auth_refusals_total",
		"Spoke connections whose client certificate was refused, by reason.", authReasons)
	if reg != nil {
		reg.MustRegister(v)
	}
	return v
}

func newEnforcerMetrics(reg prometheus.Registerer) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_hub_enroll_revoked_streams_closed_total",
		Help: "Open spoke streams closed because their cluster was revoked."})
	if reg != nil {
		reg.MustRegister(c)
	}
	return c
}
