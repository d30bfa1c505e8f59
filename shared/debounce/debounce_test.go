package debounce

import (
	"math/rand/v2"
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
		edge       Edge
		quiet, max time.Duration
		events     []time.Duration
		want       []time.Duration
	}{
		{"trailing: one event acts after quiet", Trailing, 100 * ms, time.Second, []time.Duration{0}, []time.Duration{100 * ms}},
		{"trailing: each event extends the quiet", Trailing, 100 * ms, time.Second, []time.Duration{0, 50 * ms, 120 * ms}, []time.Duration{220 * ms}},
		{"trailing: max bounds a burst that never stops", Trailing, 100 * ms, 300 * ms,
			[]time.Duration{0, 80 * ms, 160 * ms, 240 * ms, 320 * ms, 400 * ms}, []time.Duration{300 * ms, 500 * ms}},
		{"trailing: max equal to quiet: a fixed window after the first", Trailing, 100 * ms, 100 * ms,
			[]time.Duration{0, 50 * ms, 90 * ms, 150 * ms}, []time.Duration{100 * ms, 250 * ms}},
		{"trailing: no max: only the quiet", Trailing, 100 * ms, 0, []time.Duration{0, 90 * ms, 180 * ms, 270 * ms}, []time.Duration{370 * ms}},
		{"trailing: bursts apart act apart", Trailing, 100 * ms, time.Second, []time.Duration{0, 500 * ms}, []time.Duration{100 * ms, 600 * ms}},
		{"trailing: event right after an action waits the quiet", Trailing, 100 * ms, time.Second,
			[]time.Duration{0, 110 * ms}, []time.Duration{100 * ms, 210 * ms}},
		{"the zero edge is trailing", "", 100 * ms, time.Second, []time.Duration{0, 50 * ms}, []time.Duration{150 * ms}},

		{"leading: one event acts at once", Leading, 100 * ms, time.Second, []time.Duration{0}, []time.Duration{0}},
		{"leading: the rest of a burst acts once, quiet after its last", Leading, 100 * ms, time.Second,
			[]time.Duration{0, 50 * ms, 120 * ms}, []time.Duration{0, 220 * ms}},
		{"leading: max bounds the held rest of a burst that never stops", Leading, 100 * ms, 300 * ms,
			[]time.Duration{0, 80 * ms, 160 * ms, 240 * ms, 320 * ms, 400 * ms}, []time.Duration{0, 380 * ms, 500 * ms}},
		{"leading: max equal to quiet: a fixed window after the first held", Leading, 100 * ms, 100 * ms,
			[]time.Duration{0, 50 * ms, 90 * ms, 160 * ms}, []time.Duration{0, 150 * ms, 260 * ms}},
		{"leading: no max: only the quiet", Leading, 100 * ms, 0,
			[]time.Duration{0, 90 * ms, 180 * ms, 270 * ms}, []time.Duration{0, 370 * ms}},
		{"leading: event right after a trailing action is held", Leading, 100 * ms, time.Second,
			[]time.Duration{0, 50 * ms, 160 * ms}, []time.Duration{0, 150 * ms, 260 * ms}},
		{"leading: event right after a leading action is held", Leading, 100 * ms, time.Second,
			[]time.Duration{0, 99 * ms}, []time.Duration{0, 199 * ms}},
		{"leading: event a quiet period after an action acts at once", Leading, 100 * ms, time.Second,
			[]time.Duration{0, 100 * ms, 250 * ms}, []time.Duration{0, 100 * ms, 250 * ms}},
		{"leading: bursts apart act apart", Leading, 100 * ms, time.Second,
			[]time.Duration{0, 30 * ms, 500 * ms}, []time.Duration{0, 130 * ms, 500 * ms}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				d := New(tc.edge, tc.quiet, tc.max)
				if got := fires(t, d, tc.events, 2*time.Second); !same(got, tc.want) {
					t.Errorf("acted at %v, want at %v", got, tc.want)
				}
			})
		})
	}
}

// TestTimerActsAtMostOncePerQuiet: however a storm's events are spaced,
// two actions are at least Quiet apart (Max is not below Quiet), so a
// window of length W holds at most 1+W/Quiet of them — the bound
// spoke/source/kube's update storm test counts on, against a real API
// server and a real clock. A storm whose events come closer than Quiet
// acts once per Max, and once more Quiet after its end.
func TestTimerActsAtMostOncePerQuiet(t *testing.T) {
	const quiet = 100 * time.Millisecond
	for _, edge := range []Edge{Trailing, Leading} {
		for _, maxWait := range []time.Duration{0, quiet, time.Second} {
			t.Run(string(edge)+" max "+maxWait.String(), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					rng := rand.New(rand.NewPCG(26, uint64(maxWait)))
					var events []time.Duration
					at := time.Duration(0)
					for range 500 {
						// Gaps from none to two and a half quiet periods.
						at += time.Duration(rng.Int64N(int64(5 * quiet / 2)))
						events = append(events, at)
					}
					got := fires(t, New(edge, quiet, maxWait), events, at+2*time.Second)
					if len(got) < 2 {
						t.Fatalf("acted %d times on 500 events spread over %v", len(got), at)
					}
					for i := 1; i < len(got); i++ {
						if got[i]-got[i-1] < quiet {
							t.Errorf("acted at %v and %v, less than %v apart", got[i-1], got[i], quiet)
						}
					}
				})
			})
		}
	}
	t.Run("a storm acts once per max", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ms := time.Millisecond
			var events []time.Duration
			for i := range 500 { // every 7 ms from 0 to 3493 ms
				events = append(events, time.Duration(7*i)*ms)
			}
			got := fires(t, New(Trailing, quiet, 10*quiet), events, 5*time.Second)
			if want := []time.Duration{1000 * ms, 2001 * ms, 3002 * ms, 3593 * ms}; !same(got, want) {
				t.Errorf("500 events 7 ms apart acted at %v, want at %v", got, want)
			}
		})
	})
}

func TestEdgeValidate(t *testing.T) {
	for _, e := range []Edge{"", Leading, Trailing} {
		if err := e.Validate(); err != nil {
			t.Errorf("%q: %v", e, err)
		}
	}
	if err := Edge("middle").Validate(); err == nil {
		t.Error(`"middle" is valid`)
	}
}

// TestTimerLeadingPending: on the leading edge, an event after a quiet
// period is not held (it acted); one right after it is, until it acts.
func TestTimerLeadingPending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := New(Leading, 100*time.Millisecond, time.Second)
		d.Event()
		if d.Pending() {
			t.Fatal("a leading event is held")
		}
		<-d.C()
		d.Event()
		if !d.Pending() {
			t.Fatal("an event right after an action is not held")
		}
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if d.Pending() {
			t.Fatal("held after its quiet period")
		}
		<-d.C()
	})
}

// TestTimerPendingAndStop: Pending is true from an event until the burst
// acts; Stop drops a pending burst.
func TestTimerPendingAndStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := New(Trailing, 100*time.Millisecond, time.Second)
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
