// Package meshlimits names the per-mesh limits that keep one tenant from
// slowing another, and holds their metrics: what each mesh uses of a
// limit and how often a limit refused it. The hub's ingest, the ADS
// server and the push-context publisher each enforce their limits through
// funcs of plain values and report here; the hub registers one Metrics
// and hands it to all three.
package meshlimits

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// The limits, named as a mesh's record and the hub's config name them.
const (
	ObjectsPerKind  = "objectsPerKind"
	Proxies         = "proxies"
	Spokes          = "spokes"
	PushesPerSecond = "pushesPerSecond"
)

// Metrics are the per-mesh limit metrics. A nil *Metrics records nothing.
// Safe for concurrent use.
type Metrics struct {
	refusals *prometheus.CounterVec
	usage    *prometheus.GaugeVec
}

// NewMetrics registers the limit metrics with reg (nowhere if nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nave_mesh_limit_refusals_total",
			Help: "What a mesh's limit refused or held back, by mesh and limit: objects (objectsPerKind), spoke streams (spokes), proxy streams (proxies), push-context builds delayed (pushesPerSecond)."},
			[]string{"mesh", "limit"}),
		usage: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nave_mesh_limit_usage",
			Help: "What a mesh uses of a limit, by mesh and limit: its largest kind's objects (objectsPerKind), its clusters held (spokes), its proxy streams on this replica (proxies)."},
			[]string{"mesh", "limit"}),
	}
	if reg != nil {
		reg.MustRegister(m.refusals, m.usage)
	}
	return m
}

// Refused counts one refusal of mesh by limit.
func (m *Metrics) Refused(mesh, limit string) {
	if m != nil {
		m.refusals.WithLabelValues(mesh, limit).Inc()
	}
}

// Usage records what mesh uses of limit now.
func (m *Metrics) Usage(mesh, limit string, v float64) {
	if m != nil {
		m.usage.WithLabelValues(mesh, limit).Set(v)
	}
}

// Forget drops mesh's usage of limit (the mesh holds nothing of it any
// more).
func (m *Metrics) Forget(mesh, limit string) {
	if m != nil {
		m.usage.DeleteLabelValues(mesh, limit)
	}
}

// Exceeded is the reason a limit refuses something: it names the mesh,
// what it has, the limit and its value.
func Exceeded(mesh, what string, have int, limit string, max int) string {
	return fmt.Sprintf("mesh %s has %d %s, its limit %s is %d", mesh, have, what, limit, max)
}
