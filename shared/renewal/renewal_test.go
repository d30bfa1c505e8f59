package renewal

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/navemesh/nave/shared/retry"
)

func TestPolicyAt(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	end := start.Add(100 * time.Hour)
	fixed := func(r float64) func() float64 { return func() float64 { return r } }
	for _, tc := range []struct {
		name string
		p    Policy
		want time.Duration
	}{
		{"zero policy: half way", Policy{}, 50 * time.Hour},
		{"fraction", Policy{Fraction: 0.8}, 80 * time.Hour},
		{"fraction out of range", Policy{Fraction: 1.5}, 50 * time.Hour},
		{"jitter, least", Policy{Fraction: 0.5, Jitter: 0.3, Rand: fixed(0)}, 50 * time.Hour},
		{"jitter, most", Policy{Fraction: 0.5, Jitter: 0.3, Rand: fixed(0.999999)}, 80 * time.Hour},
		{"jitter, middle", Policy{Fraction: 0.7, Jitter: 0.1, Rand: fixed(0.5)}, 75 * time.Hour},
		{"jitter never reaches expiry", Policy{Fraction: 0.8, Jitter: 5, Rand: fixed(1)}, 100 * time.Hour},
	} {
		got := tc.p.At(start, end).Sub(start)
		if d := got - tc.want; d.Abs() > time.Second {
			t.Errorf("%s: due at start + %s, want + %s", tc.name, got, tc.want)
		}
	}
	// Random jitter stays within its window.
	p := Policy{Fraction: 0.5, Jitter: 0.3}
	for range 1000 {
		if d := p.At(start, end).Sub(start); d < 50*time.Hour || d > 80*time.Hour {
			t.Fatalf("jittered renewal at start + %s, want within [50h, 80h]", d)
		}
	}
	// No lifetime left: due at once (at its expiry, already past).
	if got := (Policy{}).At(end.Add(time.Hour), end); !got.Equal(end) {
		t.Errorf("expired certificate due at %s, want its NotAfter %s", got, end)
	}
}

// TestLoopRenewsWhenDue: the Loop renews at the time each renewal
// returned, retries failures on the backoff (reset by a success), honours
// the Floor, and Next says when it will renew.
func TestLoopRenewsWhenDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		var (
			calls   []time.Duration
			results = []error{nil, errors.New("hub down"), errors.New("hub down"), nil, nil}
			retries []time.Duration
		)
		renew := func(context.Context) (time.Time, error) {
			calls = append(calls, time.Since(t0))
			err := results[0]
			results = results[1:]
			if len(results) == 0 {
				return time.Now().Add(10 * time.Hour), nil
			}
			return time.Now().Add(10 * time.Second), err
		}
		l := NewLoop(renew, Options{
			Policy: Policy{Floor: 20 * time.Second, Retry: retry.Policy{Initial: time.Second, Max: 3 * time.Second, Multiplier: 2, Jitter: -1}},
			First:  t0.Add(time.Minute),
			Failed: func(_ error, in time.Duration) { retries = append(retries, in) },
		})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- l.Run(ctx) }()
		synctest.Wait()
		if got := l.Next(); !got.Equal(t0.Add(time.Minute)) {
			t.Errorf("Next before the first renewal = t0 + %s, want + 1m", got.Sub(t0))
		}
		time.Sleep(2 * time.Hour)
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		// 1m: first (ok, next in 10 s but the floor is 20 s); 1m20s: fails,
		// retry in 1 s; 1m21s: fails, retry in 2 s; 1m23s: ok (floor);
		// 1m43s: ok, next in ten hours.
		want := []time.Duration{time.Minute, 80 * time.Second, 81 * time.Second, 83 * time.Second, 103 * time.Second}
		if len(calls) != len(want) {
			t.Fatalf("renewals at %v, want at %v", calls, want)
		}
		for i := range want {
			if calls[i] != want[i] {
				t.Fatalf("renewals at %v, want at %v", calls, want)
			}
		}
		if len(retries) != 2 || retries[0] != time.Second || retries[1] != 2*time.Second {
			t.Errorf("retries in %v, want [1s 2s]", retries)
		}
		if got, want := l.Next().Sub(t0), 103*time.Second+10*time.Hour; got != want {
			t.Errorf("Next after the last renewal = t0 + %s, want + %s", got, want)
		}
	})
}

// TestLoopMaxWaitAndWake: MaxWait makes the Loop look again although
// nothing is due, and Wake renews at once.
func TestLoopMaxWaitAndWake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		var calls []time.Duration
		wake := make(chan struct{})
		l := NewLoop(func(context.Context) (time.Time, error) {
			calls = append(calls, time.Since(t0))
			return time.Now().Add(time.Hour), nil
		}, Options{MaxWait: time.Minute, Wake: wake})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- l.Run(ctx) }()
		time.Sleep(90 * time.Second) // renewed at 0 and at 1m
		wake <- struct{}{}           // renews at 1m30s
		synctest.Wait()
		time.Sleep(time.Minute) // and at 2m30s
		synctest.Wait()
		cancel()
		<-done
		want := []time.Duration{0, time.Minute, 90 * time.Second, 150 * time.Second}
		if len(calls) != len(want) {
			t.Fatalf("renewals at %v, want at %v", calls, want)
		}
		for i := range want {
			if calls[i] != want[i] {
				t.Fatalf("renewals at %v, want at %v", calls, want)
			}
		}
	})
}
