package memrelease

import (
	"context"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeRuntime is a heap the test changes between ticks.
type fakeRuntime struct {
	mu       sync.Mutex
	s        sample
	releases int
}

func (f *fakeRuntime) read() sample { f.mu.Lock(); defer f.mu.Unlock(); return f.s }

func (f *fakeRuntime) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.releases++
	f.s.spare = 0
}

func (f *fakeRuntime) alloc(n uint64, spare uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.s.allocs += n
	f.s.spare += spare
}

func (f *fakeRuntime) count() int { f.mu.Lock(); defer f.mu.Unlock(); return f.releases }

// TestReleaseAfterQuiet: a burst leaves spare heap; it is returned once
// the process has been quiet for the period, once, and not while the
// process keeps allocating.
func TestReleaseAfterQuiet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const quiet = 20 * time.Second
		f := &fakeRuntime{s: sample{live: 80 << 20}}
		r := &Releaser{quiet: quiet, read: f.read, release: f.release, log: discard(),
			released: prometheus.NewCounter(prometheus.CounterOpts{Name: "r"}), bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "b"})}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go r.run(ctx)

		// Busy: 100 MiB allocated every 5 s, leaving 60 MiB spare.
		for range 8 {
			f.alloc(100<<20, 60<<20)
			time.Sleep(quiet / 4)
			synctest.Wait()
		}
		if n := f.count(); n != 0 {
			t.Fatalf("released %d times while the process allocated", n)
		}
		// Quiet (a trickle below the budget): released once the period
		// has passed, and only once.
		for i := range 12 {
			f.alloc(1<<10, 0)
			time.Sleep(quiet / 4)
			synctest.Wait()
			if n := f.count(); i < 3 && n != 0 {
				t.Fatalf("released after %v of quiet, before the period of %v", time.Duration(i+1)*quiet/4, quiet)
			}
		}
		if n := f.count(); n != 1 {
			t.Fatalf("released %d times over three quiet periods after a burst, want 1", n)
		}
		if got := testutil.ToFloat64(r.bytes); got < 60<<20 {
			t.Errorf("released bytes counted %v, want at least the burst's 60 MiB spare", got)
		}
		// A quiet process holding little spare heap is left alone.
		f.alloc(0, 4<<20)
		time.Sleep(2 * quiet)
		synctest.Wait()
		if n := f.count(); n != 1 {
			t.Fatalf("released %d times, want no release for 4 MiB spare", n)
		}
	})
}

func TestWorthReleasing(t *testing.T) {
	for _, c := range []struct {
		s    sample
		want bool
	}{
		{sample{live: 80 << 20, spare: 70 << 20}, true},
		{sample{live: 80 << 20, spare: 19 << 20}, false}, // under a quarter of live
		{sample{live: 8 << 20, spare: 15 << 20}, false},  // under minSpare
		{sample{live: 8 << 20, spare: 17 << 20}, true},
	} {
		if got := worthReleasing(c.s); got != c.want {
			t.Errorf("worthReleasing(live %d MiB, spare %d MiB) = %v, want %v", c.s.live>>20, c.s.spare>>20, got, c.want)
		}
	}
}

// TestReadSample: the runtime's metrics are all there (a renamed metric
// would read as zero).
func TestReadSample(t *testing.T) {
	runtime.GC() // the live heap is known from the first collection on
	s := readSample()
	if s.allocs == 0 || s.live == 0 {
		t.Fatalf("readSample() = %+v: allocations and live heap must be known", s)
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
