package replica

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the replica set's metrics (nave_hub_replica_*). Safe for
// concurrent use.
type Metrics struct {
	members      prometheus.Gauge
	gossipBytes  prometheus.Counter
	peerEvents   *prometheus.CounterVec
	relayBytes   prometheus.Counter
	relayMsgs    *prometheus.CounterVec
	relayLag     prometheus.Histogram
	relayStreams prometheus.Gauge
	failovers    prometheus.Counter
	refused      prometheus.Counter
	shed         prometheus.Counter
	shedSpokes   prometheus.Counter
	spokes       prometheus.Gauge
}

// NewMetrics makes the metrics and registers them with reg (nil: nowhere).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		members: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nave_hub_replica_members",
			Help: "Live members of the replica set this replica sees, itself included."}),
		gossipBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_hub_replica_gossip_sent_bytes_total",
			Help: "Bytes of gossip (memberlist packets and streams) this replica sent."}),
		peerEvents: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_hub_replica_peer_events_total",
			Help: "Peers that joined, and peers that left or were found dead, by event (joined, gone)."}, []string{"event"}),
		relayBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_hub_replica_relay_sent_bytes_total",
			Help: "Bytes of relay messages this replica sent to its peers (its spokes' state)."}),
		relayMsgs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_hub_replica_relay_messages_total",
			Help: "Relay messages answered by peers, by result (ack, nack)."}, []string{"result"}),
		relayLag: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "nave_hub_replica_relay_lag_seconds",
			Help:    "Time from a change of a spoke's state on its owner to the peer's acknowledgement of its relay.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		relayStreams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nave_hub_replica_relay_streams",
			Help: "Open relay streams this replica sends on (one per peer and relayed cluster)."}),
		failovers: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_hub_replica_failovers_total",
			Help: "Spokes that connected to this replica while another replica had owned them (re-homed here)."}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_hub_replica_relay_refused_total",
			Help: "Relay streams refused: a caller that is not a replica, bad metadata, or a late relay of an earlier owner."}),
		shed: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_hub_replica_shed_connections_total",
			Help: "Proxy connections this replica closed to even the spread across replicas (replicas.shedRate)."}),
		shedSpokes: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_hub_replica_shed_spokes_total",
			Help: "Spoke streams this replica closed, asking the spoke to reconnect at once elsewhere, to even the spread of spokes across replicas (replicas.spokeShedRate)."}),
		spokes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nave_hub_replica_spokes",
			Help: "Spokes this replica owns: their Push stream is open here."}),
	}
	if reg != nil {
		reg.MustRegister(m.members, m.gossipBytes, m.peerEvents, m.relayBytes, m.relayMsgs, m.relayLag, m.relayStreams, m.failovers, m.refused, m.shed, m.shedSpokes, m.spokes)
	}
	return m
}
