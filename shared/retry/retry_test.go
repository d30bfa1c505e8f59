package retry

import (
	"testing"
	"time"
)

// TestBackoffStaysWithinItsBounds draws the waits of a long outage: none
// exceeds the maximum (the jitter must not add to the maximum), the first is
// within half of the initial wait, and the waits reach the maximum.
func TestBackoffStaysWithinItsBounds(t *testing.T) {
	const initial, maxWait = 250 * time.Millisecond, 15 * time.Second
	b := New(initial, maxWait)
	for round := range 50 {
		b.Reset()
		if w := b.NextBackOff(); w < initial/2 || w > initial*3/2 {
			t.Fatalf("round %d: first wait %s, want within [%s, %s]", round, w, initial/2, initial*3/2)
		}
		reached := false
		for i := range 100 {
			w := b.NextBackOff()
			if w <= 0 || w > maxWait {
				t.Fatalf("round %d: wait %d is %s, want within (0, %s]", round, i+1, w, maxWait)
			}
			reached = reached || w == maxWait
		}
		if !reached {
			t.Fatalf("round %d: 100 waits never reached the maximum %s", round, maxWait)
		}
	}
}

// TestPolicyWaits: the waits follow Initial × Multiplierⁿ, jittered within
// ± Jitter and capped at Max; without jitter they are exact; Reset starts
// over.
func TestPolicyWaits(t *testing.T) {
	exact := Policy{Initial: time.Second, Max: 5 * time.Second, Multiplier: 2, Jitter: -1}.New()
	for i, want := range []time.Duration{1, 2, 4, 5, 5} {
		if w := exact.NextBackOff(); w != want*time.Second {
			t.Fatalf("wait %d without jitter = %s, want %s", i, w, want*time.Second)
		}
	}
	exact.Reset()
	if w := exact.NextBackOff(); w != time.Second {
		t.Fatalf("first wait after Reset = %s, want 1s", w)
	}
	for _, tc := range []struct {
		r    float64
		want []time.Duration
	}{
		{0, []time.Duration{700 * time.Millisecond, 1400 * time.Millisecond, 2800 * time.Millisecond, 3500 * time.Millisecond}},
		{0.999999, []time.Duration{1300 * time.Millisecond, 2600 * time.Millisecond, 5 * time.Second, 5 * time.Second}},
	} {
		b := Policy{Initial: time.Second, Max: 5 * time.Second, Multiplier: 2, Jitter: 0.3, Rand: func() float64 { return tc.r }}.New()
		for i, want := range tc.want {
			if w := b.NextBackOff(); (w - want).Abs() > time.Millisecond {
				t.Fatalf("r=%g: wait %d = %s, want %s", tc.r, i, w, want)
			}
		}
	}
}
