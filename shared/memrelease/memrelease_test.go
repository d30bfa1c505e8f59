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
	// collections counts collect calls; liveNow, when set, is the live
	// heap a collection finds (the sample's is the last collection's).
	collections int
	liveNow     uint64
}

func (f *fakeRuntime) collect() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.collections++
	if f.liveNow != 0 {
		f.s.spare += f.s.live - min(f.s.live, f.liveNow)
		f.s.live = f.liveNow
	}
}

func (f *fakeRuntime) collected() int { f.mu.Lock(); defer f.mu.Unlock(); return f.collections }

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
		r := &Releaser{quiet: quiet, read: f.read, collect: f.collect, release: f.release, log: discard(),
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
		// Quiet (a trickle, metric scrapes say, under half the live heap
		// per period): released once the period has passed, and only once.
		for i := range 12 {
			f.alloc(8<<20, 0)
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
		// A quiet process holding less spare heap than live is left alone.
		f.alloc(0, 4<<20)
		time.Sleep(2 * quiet)
		synctest.Wait()
		if n := f.count(); n != 1 {
			t.Fatalf("released %d times, want no release for 4 MiB spare", n)
		}
		// Nor one whose spare heap grew without a burst since the release
		// (an idle process's trickle of garbage).
		f.alloc(10<<20, 120<<20)
		time.Sleep(quiet)
		synctest.Wait()
		for range 8 {
			f.alloc(1<<10, 0)
			time.Sleep(quiet / 4)
			synctest.Wait()
		}
		if n := f.count(); n != 1 {
			t.Fatalf("released %d times, want no release without a burst since the last one", n)
		}
	})
}

// TestReleaseJudgesByWhatIsLiveNow: when the last collection ran during
// the burst, its live heap overstates what is live once quiet; one
// collection judges the burst by what is live now. A burst whose
// headroom is still short after it is judged once, not every period.
func TestReleaseJudgesByWhatIsLiveNow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const quiet = 20 * time.Second
		// The storm's last collection found 110 MiB live; 70 MiB spare.
		f := &fakeRuntime{s: sample{allocs: 500 << 20, live: 110 << 20, spare: 70 << 20}, liveNow: 60 << 20}
		r := &Releaser{quiet: quiet, read: f.read, collect: f.collect, release: f.release, log: discard(),
			released: prometheus.NewCounter(prometheus.CounterOpts{Name: "r"}), bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "b"})}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go r.run(ctx)
		time.Sleep(2 * quiet)
		synctest.Wait()
		if n, c := f.count(), f.collected(); n != 1 || c != 1 {
			t.Fatalf("after a storm judged by a stale live heap: %d releases, %d collections; want 1 and 1", n, c)
		}
		// A modest burst (one change: 90 MiB allocated, 20 MiB spare
		// after a collection) is judged once and left alone.
		f.alloc(90<<20, 0)
		f.mu.Lock()
		f.s.live, f.liveNow = 80<<20, 60<<20
		f.mu.Unlock()
		time.Sleep(4 * quiet)
		synctest.Wait()
		if n, c := f.count(), f.collected(); n != 1 || c != 2 {
			t.Fatalf("after a modest burst: %d releases, %d collections; want 1 and 2", n, c)
		}
	})
}

func TestWorthReleasing(t *testing.T) {
	for _, c := range []struct {
		s     sample
		since uint64
		want  bool
	}{
		{sample{allocs: 500 << 20, live: 60 << 20, spare: 100 << 20}, 0, true}, // after a storm
		{sample{allocs: 500 << 20, live: 60 << 20, spare: 40 << 20}, 0, false}, // after one change: under live
		{sample{allocs: 500 << 20, live: 8 << 20, spare: 15 << 20}, 0, false},  // under minSpare
		{sample{allocs: 500 << 20, live: 8 << 20, spare: 17 << 20}, 0, true},
		{sample{allocs: 500 << 20, live: 60 << 20, spare: 100 << 20}, 450 << 20, false}, // no burst since: 50 MiB allocated
	} {
		if got := worthReleasing(c.s, c.since); got != c.want {
			t.Errorf("worthReleasing(live %d MiB, spare %d MiB, %d MiB allocated since) = %v, want %v",
				c.s.live>>20, c.s.spare>>20, (c.s.allocs-c.since)>>20, got, c.want)
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
