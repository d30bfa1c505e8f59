package enroll

import (
	"testing"
	"time"
)

func TestRenewAt(t *testing.T) {
	nb := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	na := nb.Add(100 * time.Hour)
	for _, c := range []struct {
		jitter float64
		want   time.Duration
	}{
		{0, 80 * time.Hour},
		{0.5, 75 * time.Hour},
		{0.999999, 70*time.Hour + 36*time.Millisecond},
	} {
		got := renewAt(nb, na, c.jitter).Sub(nb)
		if d := got - c.want; d < -time.Millisecond || d > time.Millisecond {
			t.Errorf("renewAt(jitter %v) = NotBefore + %v, want + %v", c.jitter, got, c.want)
		}
	}
}
