// Package meshlimits names the per-mesh limits that keep one tenant from
// slowing another, and holds their metrics: what each mesh uses of a
// limit and how often a limit refused it. The hub's ingest, the ADS
// server and the push-context publisher each enforce their limits through
// funcs of plain values and report here; the hub registers one Metrics
// and hands it to all three.
package meshlimits

import (
	"fmt"
	"maps"
	"sync"

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

	// mu guards the same values by mesh, for Of.
	mu     sync.Mutex
	byMesh map[string]*Usage
}

// Usage is what a mesh uses of its limits and how often each refused it,
// by limit name (Of).
type Usage struct {
	Usage    map[string]float64 `json:"usage"`
	Refusals map[string]float64 `json:"refusals"`
}

// Flat is u as one map, as `navectl mesh get` shows it: each limit's
// usage under its name, its refusals under refusals.NAME.
func (u Usage) Flat() map[string]float64 {
	out := make(map[string]float64, len(u.Usage)+len(u.Refusals))
	for k, v := range u.Usage {
		out[k] = v
	}
	for k, v := range u.Refusals {
		out["refusals."+k] = v
	}
	return out
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
	m.byMesh = map[string]*Usage{}
	if reg != nil {
		reg.MustRegister(m.refusals, m.usage)
	}
	return m
}

// mesh returns mesh's Usage (m.mu held).
func (m *Metrics) mesh(mesh string) *Usage {
	u := m.byMesh[mesh]
	if u == nil {
		u = &Usage{Usage: map[string]float64{}, Refusals: map[string]float64{}}
		m.byMesh[mesh] = u
	}
	return u
}

// Of returns a copy of what mesh uses of its limits and their refusals
// on this replica (what navectl mesh get shows with the limits).
func (m *Metrics) Of(mesh string) Usage {
	out := Usage{Usage: map[string]float64{}, Refusals: map[string]float64{}}
	if m == nil {
		return out
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if u := m.byMesh[mesh]; u != nil {
		maps.Copy(out.Usage, u.Usage)
		maps.Copy(out.Refusals, u.Refusals)
	}
	return out
}

// Refused counts one refusal of mesh by limit.
func (m *Metrics) Refused(mesh, limit string) {
	if m != nil {
		m.refusals.WithLabelValues(mesh, limit).Inc()
		m.mu.Lock()
		m.mesh(mesh).Refusals[limit]++
		m.mu.Unlock()
	}
}

// Usage records what mesh uses of limit now.
func (m *Metrics) Usage(mesh, limit string, v float64) {
	if m != nil {
		m.usage.WithLabelValues(mesh, limit).Set(v)
		m.mu.Lock()
		m.mesh(mesh).Usage[limit] = v
		m.mu.Unlock()
	}
}

// Forget drops mesh's usage of limit (the mesh holds nothing of it any
// more).
func (m *Metrics) Forget(mesh, limit string) {
	if m != nil {
		m.usage.DeleteLabelValues(mesh, limit)
		m.mu.Lock()
		delete(m.mesh(mesh).Usage, limit)
		m.mu.Unlock()
	}
}

// ForgetMesh drops every series and count of mesh (a mesh deleted: a
// re-created one starts from zero).
func (m *Metrics) ForgetMesh(mesh string) {
	if m == nil {
		return
	}
	m.usage.DeletePartialMatch(prometheus.Labels{"mesh": mesh})
	m.refusals.DeletePartialMatch(prometheus.Labels{"mesh": mesh})
	m.mu.Lock()
	delete(m.byMesh, mesh)
	m.mu.Unlock()
}

// Exceeded is the reason a limit refuses something: it names the mesh,
// what it has, the limit and its value.
func Exceeded(mesh, what string, have int, limit string, max int) string {
	return fmt.Sprintf("mesh %s has %d %s, its limit %s is %d", mesh, have, what, limit, max)
}
