// Package metrictest reads Prometheus metrics back in tests.
package metrictest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Value is the sum, over name's series whose labels include every given
// (name, value) pair, of each counter's or gauge's value and each
// histogram's sample count; 0 when no series matches. labels are pairs:
// Value(t, reg, "x_total", "reason", "revoked").
func Value(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	if len(labels)%2 != 0 {
		t.Fatalf("metrictest.Value(%s): labels must be name, value pairs, got %q", name, labels)
	}
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for i := 0; i < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue series
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}
