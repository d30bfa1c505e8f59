package ads

import (
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	connections prometheus.Gauge
	pushes      *prometheus.CounterVec
	nacks       *prometheus.CounterVec
	bytes       *prometheus.CounterVec
	stuck       prometheus.Counter
	convergence *prometheus.HistogramVec
	// admissionWait times how long new streams waited for admission.
	admissionWait  prometheus.Histogram
	admissionQueue prometheus.GaugeFunc
	// pushSeconds times pushing one push context to one proxy; pending
	// counts proxies with a push pending.
	pushSeconds prometheus.Histogram
	pending     prometheus.GaugeFunc
	// budgetWait times waits for send budget; inflight is the budget taken.
	budgetWait prometheus.Histogram
	inflight   prometheus.GaugeFunc
}

func newMetrics(reg prometheus.Registerer, waiting, pending, inflight func() float64) *metrics {
	m := &metrics{
		connections: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nave_xds_connections",
			Help: "Connected proxy ADS streams."}),
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_xds_pushes_total",
			Help: "Discovery responses sent, by type and trigger (request: answering a proxy's request; config or endpoints: a change of that kind)."}, []string{"type", "trigger"}),
		convergence: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "nave_xds_convergence_seconds",
			Help:    "Time from a change reaching the hub to a proxy ACKing the response that carries it, by type.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}, []string{"type"}),
		nacks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_xds_nacks_total",
			Help: "Responses proxies rejected, by type."}, []string{"type"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_xds_sent_bytes_total",
			Help: "Resource bytes sent to proxies, by type."}, []string{"type"}),
		stuck: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_xds_stuck_disconnects_total",
			Help: "Proxy streams ended because the proxy did not read a response within xds.sendTimeout."}),
		admissionWait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "nave_xds_admission_wait_seconds",
			Help: "How long new proxy streams waited for admission (xds.admissionRate).", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		admissionQueue: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "nave_xds_admission_queue",
			Help: "New proxy streams waiting for admission."}, waiting),
		pushSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "nave_xds_push_duration_seconds",
			Help:    "Time to push a new push context to one proxy: generating (or reusing) its resources and sending every changed type.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18)}),
		pending: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "nave_xds_pending_pushes",
			Help: "Proxies whose mesh has a newer push context than the one last pushed to them (at most one pending push per proxy)."}, pending),
		budgetWait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "nave_xds_send_budget_wait_seconds",
			Help:    "How long responses of 64 KiB or more waited for room in xds.maxInflightBytes before being sent.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18)}),
		inflight: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "nave_xds_inflight_bytes",
			Help: "Bytes of responses of 64 KiB or more being sent now (bounded by xds.maxInflightBytes)."}, inflight),
	}
	if reg != nil {
		reg.MustRegister(m.connections, m.pushes, m.nacks, m.bytes, m.stuck, m.admissionWait, m.admissionQueue, m.convergence, m.pushSeconds, m.pending, m.budgetWait, m.inflight)
	}
	return m
}
