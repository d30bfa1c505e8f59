package uplink

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	state      *prometheus.GaugeVec
	reconnects prometheus.Counter
	moves      prometheus.Counter
	messages   prometheus.Counter
	resources  prometheus.Counter
	bytes      prometheus.Counter
	nacks      prometheus.Counter
	ackLatency prometheus.Histogram
	resumes    *prometheus.CounterVec

	watchResponses prometheus.Counter
	watchNacks     prometheus.Counter
	viewSaves      prometheus.Counter
	pollRefused    prometheus.Counter
}

var states = []string{StateWaiting, StateConnecting, StateSyncing, StateSynced, StateBackoff, StateWaitingHub}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nave_spoke_uplink_state",
			Help: "1 for the uplink's current state (waiting-for-source, connecting, syncing, synced, backoff; polled mode: waiting-for-hub)."}, []string{"state"}),
		reconnects: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_spoke_uplink_reconnects_total",
			Help: "Hub streams lost and retried."}),
		moves: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_spoke_uplink_moves_total",
			Help: "Hub streams a hub replica closed to move this spoke to another replica (balancing); each reconnects at once."}),
		messages: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_spoke_uplink_messages_total",
			Help: "Messages sent to the hub."}),
		resources: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_spoke_uplink_resources_total",
			Help: "Resource upserts and removals sent to the hub."}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_spoke_uplink_sent_bytes_total",
			Help: "Bytes of messages sent to the hub."}),
		nacks: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_spoke_uplink_nacks_total",
			Help: "Messages the hub NACKed."}),
		ackLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "nave_spoke_uplink_ack_seconds",
			Help: "Time from sending a message to the hub's answer.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		resumes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_spoke_uplink_resumes_total",
			Help: "Streams on which the spoke asked the hub to resume, by result (resumed: it sent only what differed from the hub's state; full: the hub held none, the full state was sent; bad-hint: the hub's hint did not parse, the stream was ended)."}, []string{"result"}),
		watchResponses: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_spoke_watch_responses_total",
			Help: "Watch responses received from the hub (the remote view)."}),
		watchNacks: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_spoke_watch_nacks_total",
			Help: "Watch responses the spoke NACKed (a resource it refused)."}),
		viewSaves: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_spoke_remote_view_saves_total",
			Help: "Times the remote view was written to the state dir."}),
		pollRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_spoke_poll_refused_total",
			Help: "Connections to the Poll listener (polled mode) refused at the TLS handshake because the certificate presented is not the hub's (a caller presenting none is refused by TLS itself, uncounted)."}),
	}
	if reg != nil {
		reg.MustRegister(m.state, m.reconnects, m.moves, m.messages, m.resources, m.bytes, m.nacks, m.ackLatency, m.resumes, m.watchResponses, m.watchNacks, m.viewSaves, m.pollRefused)
	}
	return m
}

func (m *metrics) setState(s string) {
	for _, st := range states {
		v := 0.0
		if st == s {
			v = 1
		}
		m.state.WithLabelValues(st).Set(v)
	}
}
