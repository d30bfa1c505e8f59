package testwait

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fatalTB records the failure that ends a wait.
type fatalTB struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// run calls wait as a test goroutine would and returns its failure ("" if
// it returned).
func run(t *testing.T, wait func(testing.TB)) string {
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); wait(f) }()
	<-done
	return f.msg
}

func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		n := 0
		msg := run(t, func(tb testing.TB) {
			For(tb, time.Minute, func() error {
				if n++; n < 5 {
					return fmt.Errorf("try %d", n)
				}
				return nil
			})
		})
		if msg != "" || n != 5 {
			t.Errorf("failed with %q after %d calls, want success at the 5th", msg, n)
		}
		if d := time.Since(start); d != 4*Interval {
			t.Errorf("took %s, want 4 intervals", d)
		}
	})
}

func TestForFailsWithTheLastError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := 0
		msg := run(t, func(tb testing.TB) {
			For(tb, time.Second, func() error { n++; return fmt.Errorf("try %d", n) })
		})
		if want := fmt.Sprintf("not within 1s: try %d", n); msg != want {
			t.Errorf("failed with %q, want %q", msg, want)
		}
	})
}

func TestUntilSaysWhatItWaitedFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		msg := run(t, func(tb testing.TB) { Until(tb, "the moon", func() bool { return false }) })
		if want := "not within 30s: the moon"; msg != want {
			t.Errorf("failed with %q, want %q", msg, want)
		}
	})
}

func TestPollEndsWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		last := errors.New("still not")
		if err := Poll(ctx, func() error { return last }); err != last {
			t.Errorf("Poll: %v, want the last error", err)
		}
	})
}
