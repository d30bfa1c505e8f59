package ingest

import "github.com/prometheus/client_golang/prometheus"

// storeMetrics are the Store's: what it holds and withdraws.
type storeMetrics struct {
	resources   *prometheus.GaugeVec
	withdrawals prometheus.Counter
	withdrawn   prometheus.GaugeFunc
	missing     prometheus.GaugeFunc
	skipped     prometheus.Counter
}

func newStoreMetrics(reg prometheus.Registerer, withdrawn, missing func() float64) *storeMetrics {
	m := &storeMetrics{
		resources: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nave_hub_ingest_resources",
			Help: "Resources held per cluster."}, []string{"mesh", "cluster"}),
		withdrawals: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_hub_ingest_withdrawals_total",
			Help: "Clusters whose resources were withdrawn after their grace period."}),
		withdrawn: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "nave_hub_ingest_clusters_withdrawn",
			Help: "Clusters withdrawn after their grace period that have not reconnected since (listed at /debug/spokes)."}, withdrawn),
		missing: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "nave_hub_ingest_clusters_missing",
			Help: "Enrolled clusters that have not connected since the hub started (listed at /debug/spokes)."}, missing),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_hub_ingest_resume_unchanged_resources_total",
			Help: "Resources a resumed stream did not send again because the hub held them unchanged (counted at its synced marker)."}),
	}
	if reg != nil {
		reg.MustRegister(m.resources, m.withdrawals, m.withdrawn, m.missing, m.skipped)
	}
	return m
}

// serverMetrics are the Server's: streams and their messages.
type serverMetrics struct {
	streams  prometheus.Gauge
	refused  prometheus.Counter
	claims   prometheus.Counter
	messages *prometheus.CounterVec
	rejected prometheus.Counter
	resumes  *prometheus.CounterVec
	received *prometheus.CounterVec
}

func newServerMetrics(reg prometheus.Registerer) *serverMetrics {
	m := &serverMetrics{
		streams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nave_hub_spoke_streams",
			Help: "Open spoke Push streams."}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_hub_spoke_streams_refused_total",
			Help: "Spoke streams refused at authentication."}),
		claims: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_hub_spoke_claim_mismatches_total",
			Help: "Spoke streams whose metadata claimed another mesh or cluster than their certificate (served as the certificate says)."}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_hub_ingest_messages_total",
			Help: "Spoke messages answered, by result (ack, nack)."}, []string{"result"}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_hub_ingest_rejected_resources_total",
			Help: "Pushed resources refused as invalid."}),
		resumes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_hub_ingest_resume_requests_total",
			Help: "Streams that asked to resume, by stream (spoke, polled, relay) and result (resumed: the hub sent what it held; full: it held no complete state)."}, []string{"stream", "result"}),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_hub_ingest_received_bytes_total",
			Help: "Bytes of messages received on cluster streams, by stream (spoke, polled, relay)."}, []string{"stream"}),
	}
	if reg != nil {
		reg.MustRegister(m.streams, m.refused, m.claims, m.messages, m.rejected, m.resumes, m.received)
	}
	return m
}
