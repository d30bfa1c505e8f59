package ads

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/navemesh/nave/shared/gen"
)

const (
	clusterType  = gen.ClusterType
	endpointType = gen.EndpointType
	listenerType = gen.ListenerType
	routeType    = gen.RouteType
)

type metrics struct {
	connections prometheus.Gauge
	pushes      *prometheus.CounterVec
	nacks       *prometheus.CounterVec
	bytes       *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		connections: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nave_hub_xds_connections",
			Help: "Connected proxy ADS streams."}),
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_hub_xds_pushes_total",
			Help: "Discovery responses sent, by type."}, []string{"type"}),
		nacks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_hub_xds_nacks_total",
			Help: "Responses proxies rejected, by type."}, []string{"type"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_hub_xds_sent_bytes_total",
			Help: "Resource bytes sent to proxies, by type."}, []string{"type"}),
	}
	if reg != nil {
		reg.MustRegister(m.connections, m.pushes, m.nacks, m.bytes)
	}
	return m
}
