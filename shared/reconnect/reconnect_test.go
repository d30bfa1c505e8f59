package reconnect

import (
	"testing"
	"time"
)

// TestBackoffStaysWithinItsBounds draws the waits of a long outage: none
// exceeds the maximum (the jitter must not add to the maximum), the first is
// within half of the initial wait, and the waits reach the maximum.
func TestBackoffStaysWithinItsBounds(t *testing.T) {
	const initial, maxWait = 250 * time.Millisecond, 15 * time.Second
	b := Backoff(initial, maxWait)
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
