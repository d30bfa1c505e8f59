package e2e

import (
	"testing"
	"time"

	"github.com/navemesh/nave/e2e/loadgen"
)

// TestLoadBenchmarkOnce is the load benchmark's twin (cmd/nave-load,
// make bench-load): every scenario once at a tiny scale, over both ADS
// variants, against the real hub binary. It checks that each scenario
// completes and measures something; performance is not asserted here.
func TestLoadBenchmarkOnce(t *testing.T) {
	for _, delta := range []bool{false, true} {
		res, err := loadgen.Run(t.Context(), loadgen.Config{HubBinary: binary("nave-hub"),
			Workload: loadgen.Workload{Services: 20, Endpoints: 2}, Proxies: 6, Delta: delta,
			ChurnFor: 2 * time.Second, ChurnRate: 10, FlapFor: time.Second, Deadline: 60 * time.Second})
		if err != nil {
			t.Fatalf("delta=%v: %v", delta, err)
		}
		if len(res) != 4 {
			t.Fatalf("delta=%v: %d results, want S1–S4", delta, len(res))
		}
		for _, r := range res[:3] {
			if r.N == 0 || r.Max <= 0 || r.Bytes == 0 {
				t.Errorf("delta=%v: %s measured nothing: %+v", delta, r.Scenario, r)
			}
		}
		if s4 := res[3]; s4.Responses != 0 {
			t.Errorf("delta=%v: a spoke flap with unchanged state sent %d responses to proxies", delta, s4.Responses)
		}
		t.Logf("delta=%v: %+v", delta, res)
	}
}
