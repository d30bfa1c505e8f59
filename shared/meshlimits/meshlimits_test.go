package meshlimits

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestOfReportsAMeshAlone: Of returns what was recorded for one mesh, not
// another's, and a nil Metrics records nothing.
func TestOfReportsAMeshAlone(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	m.Usage("a", Proxies, 3)
	m.Usage("a", Spokes, 2)
	m.Forget("a", Spokes)
	m.Refused("a", Proxies)
	m.Refused("a", Proxies)
	m.Usage("b", Proxies, 7)
	got := m.Of("a")
	if len(got.Usage) != 1 || got.Usage[Proxies] != 3 || got.Refusals[Proxies] != 2 || len(got.Refusals) != 1 {
		t.Errorf("Of(a) = %+v, want proxies used 3, refused twice", got)
	}
	var none *Metrics
	none.Refused("a", Proxies)
	if u := none.Of("a"); len(u.Usage)+len(u.Refusals) != 0 {
		t.Errorf("a nil Metrics reports %+v", u)
	}
	if r := Exceeded("a", "proxies", 3, Proxies, 3); !strings.Contains(r, "its limit proxies is 3") {
		t.Errorf("Exceeded = %q", r)
	}
}

// TestForgetMeshDropsItsSeries: a deleted mesh's series and counts go,
// another mesh's stay; Flat names refusals apart from usage.
func TestForgetMeshDropsItsSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.Usage("a", Proxies, 3)
	m.Refused("a", Spokes)
	m.Usage("b", Proxies, 7)
	if f := m.Of("a").Flat(); f[Proxies] != 3 || f["refusals."+Spokes] != 1 {
		t.Errorf("Flat = %v", f)
	}
	m.ForgetMesh("a")
	if u := m.Of("a"); len(u.Usage)+len(u.Refusals) != 0 {
		t.Errorf("after ForgetMesh: %+v", u)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var series []string
	for _, f := range families {
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "mesh" {
					series = append(series, f.GetName()+"/"+l.GetValue())
				}
			}
		}
	}
	if strings.Join(series, ",") != "nave_mesh_limit_usage/b" {
		t.Errorf("series left: %v, want b's usage only", series)
	}
}
