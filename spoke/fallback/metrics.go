package fallback

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	active      prometheus.GaugeFunc
	proxies     prometheus.GaugeFunc
	transitions *prometheus.CounterVec
	refused     prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, s *Server) *metrics {
	m := &metrics{
		active: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "nave_spoke_fallback_active",
			Help: "1 while the spoke serves xDS for its cluster because the hub is gone (fallback)."}, func() float64 {
			if s.Active() {
				return 1
			}
			return 0
		}),
		proxies: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "nave_spoke_fallback_proxies",
			Help: "Proxy ADS streams the spoke serves in fallback."}, func() float64 {
			s.mu.Lock()
			defer s.mu.Unlock()
			return float64(len(s.streams))
		}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_spoke_fallback_transitions_total",
			Help: "Fallback transitions, by direction: activate (the hub was gone for fallback.after), hand_back (the hub was synced for fallback.handBackAfter)."}, []string{"direction"}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_spoke_fallback_refused_streams_total",
			Help: "Proxy streams refused (UNAVAILABLE) because the hub is serving."}),
	}
	m.transitions.WithLabelValues("activate")
	m.transitions.WithLabelValues("hand_back")
	if reg != nil {
		reg.MustRegister(m.active, m.proxies, m.transitions, m.refused)
	}
	return m
}
