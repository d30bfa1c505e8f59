package enroll

import (
	"testing"
	"time"
)

// TestRenewalPolicy: a cluster certificate is due between 70 and 80 % of
// its lifetime.
func TestRenewalPolicy(t *testing.T) {
	nb := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	na := nb.Add(100 * time.Hour)
	for _, c := range []struct {
		r    float64
		want time.Duration
	}{
		{0, 70 * time.Hour},
		{0.5, 75 * time.Hour},
		{0.999999, 80*time.Hour - 36*time.Millisecond},
	} {
		p := renewalPolicy
		p.Rand = func() float64 { return c.r }
		got := p.At(nb, na).Sub(nb)
		if d := got - c.want; d < -time.Millisecond || d > time.Millisecond {
			t.Errorf("due (r %v) at NotBefore + %v, want + %v", c.r, got, c.want)
		}
	}
}
