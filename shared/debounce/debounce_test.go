package debounce

import (
	"testing"
	"testing/synctest"
	"time"
)

// fires returns the times (since t0) at which d's C received, with events
// sent at the given offsets, until the end.
func fires(t *testing.T, d *Timer, events []time.Duration, end time.Duration) []time.Duration {
	t.Helper()
	t0 := time.Now()
	var got []time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-d.C():
				got = append(got, time.Since(t0))
			case <-t.Context().Done():
				return
			}
		}
	}()
	for _, at := range events {
		time.Sleep(at - time.Since(t0))
		d.Event()
	}
	time.Sleep(end - time.Since(t0))
	synctest.Wait()
	return got
}

func same(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestTimer(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name       string
		quiet, max time.Duration
		events     []time.Duration
		want       []time.Duration
	}{
		{"one event acts after quiet", 100 * ms, time.Second, []time.Duration{0}, []time.Duration{100 * ms}},
		{"each event extends the quiet", 100 * ms, time.Second, []time.Duration{0, 50 * ms, 120 * ms}, []time.Duration{220 * ms}},
		{"max bounds a burst that never stops", 100 * ms, 300 * ms,
			[]time.Duration{0, 80 * ms, 160 * ms, 240 * ms, 320 * ms, 400 * ms}, []time.Duration{300 * ms, 500 * ms}},
		{"max equal to quiet: a fixed window after the first", 100 * ms, 100 * ms,
			[]time.Duration{0, 50 * ms, 90 * ms, 150 * ms}, []time.Duration{100 * ms, 250 * ms}},
		{"no max: only the quiet", 100 * ms, 0, []time.Duration{0, 90 * ms, 180 * ms, 270 * ms}, []time.Duration{370 * ms}},
		{"bursts apart act apart", 100 * ms, time.Second, []time.Duration{0, 500 * ms}, []time.Duration{100 * ms, 600 * ms}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				d := New(tc.quiet, tc.max)
				if got := fires(t, d, tc.events, 2*time.Second); !same(got, tc.want) {
					t.Errorf("acted at %v, want at %v", got, tc.want)
				}
			})
		})
	}
}

// TestTimerPendingAndStop: Pending is true from an event until the burst
// acts; Stop drops a pending burst.
func TestTimerPendingAndStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := New(100*time.Millisecond, time.Second)
		if d.Pending() {
			t.Fatal("pending before any event")
		}
		d.Event()
		if !d.Pending() {
			t.Fatal("not pending after an event")
		}
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if d.Pending() {
			t.Fatal("pending after the burst acted")
		}
		<-d.C()
		d.Event()
		d.Stop()
		time.Sleep(time.Second)
		synctest.Wait()
		select {
		case <-d.C():
			t.Fatal("a stopped burst acted")
		default:
		}
	})
}
