// Package memrelease returns a process's free heap memory to the operating
// system once the process has gone quiet after a burst (decision 052).
//
// Go's collector lets the heap grow to twice what is live (GOGC 100) and
// its scavenger keeps about as much mapped as the heap in use at the last
// collection: after a burst (a connection storm, a fan-out) a process that
// then idles holds the burst's headroom for minutes — for the hub with 500
// idle proxies, about as much again as its live heap. A Releaser watches
// the runtime's own counters and, once the process has allocated little for
// a quiet period while holding over twice its live heap, collects and
// returns the free memory (debug.FreeOSMemory): one collection per burst
// (a heap's worth of allocation since the last one), none while busy, none
// after a modest burst (whose pages the next one would fault in again).
package memrelease

import (
	"context"
	"log/slog"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Options configure a Releaser: a plain value, read once by New.
type Options struct {
	// Quiet is how long the process must have allocated little (less
	// than half its live heap, at least 1 MiB: it would not reach its
	// next collection in that time) before its free heap is returned.
	// Zero or less: never.
	Quiet      time.Duration
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

// minSpare is the least spare heap worth a collection to return.
const minSpare = 16 << 20

// sample is what the runtime says of its heap at one moment.
type sample struct {
	allocs uint64 // bytes allocated since the process started
	live   uint64 // heap marked live by the last collection
	spare  uint64 // heap a collection can return: free pages, and dead objects
}

// quietBudget is how much a process may allocate within a quiet period
// and still be quiet: half its live heap, so that metric scrapes, health
// probes and keepalives do not keep an idle process busy, while a burst
// (hundreds of MB in seconds) is never quiet.
func quietBudget(live uint64) uint64 { return max(live/2, 1<<20) }

// worthReleasing reports whether a process holding s, which had allocated
// since bytes at the last release, has been through a burst since (it
// allocated at least its live heap, and minSpare) and holds a burst's
// headroom: more spare heap than live (the heap mapped is over twice what
// is live), at least minSpare. Without the burst, an idle process's
// trickle of garbage would make it collect again every few minutes for
// little; below the headroom, a modest burst (one config change) is left
// alone, since releasing would make the next one fault its pages in again.
func worthReleasing(s sample, since uint64) bool {
	return burstSince(s, since) && headroom(s)
}

// burstSince reports whether a process holding s has allocated at least
// its live heap (and minSpare) since it had allocated since bytes.
func burstSince(s sample, since uint64) bool { return s.allocs-since >= max(s.live, minSpare) }

// headroom reports whether s holds more spare heap than live (and
// minSpare): a storm's headroom, not one change's.
func headroom(s sample) bool { return s.spare > max(s.live, minSpare) }

// Releaser returns the process's free heap memory once it is quiet (see
// the package doc). Run it once per process; its counters are safe for
// concurrent use.
type Releaser struct {
	quiet time.Duration
	// read, collect and release are the runtime's, or a test's.
	read     func() sample
	collect  func()
	release  func()
	released prometheus.Counter
	bytes    prometheus.Counter
	log      *slog.Logger
}

// New returns a Releaser, its counters registered with o.Registerer.
func New(o Options) *Releaser {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Releaser{quiet: o.Quiet, read: readSample, collect: runtime.GC, release: debug.FreeOSMemory, log: o.Logger,
		released: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_memory_idle_releases_total",
			Help: "collections run to return the heap's free memory to the OS once the process was quiet after a burst"}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "nave_memory_idle_released_bytes_total",
			Help: "spare heap (free, or held by garbage) those collections found, in bytes: about what they returned"}),
	}
	if o.Registerer != nil {
		o.Registerer.MustRegister(r.released, r.bytes)
	}
	return r
}

// Run watches the process until ctx ends; it returns at once if the quiet
// period is not positive.
func (r *Releaser) Run(ctx context.Context) {
	if r.quiet > 0 {
		r.run(ctx)
	}
}

// run samples every quarter of the quiet period. A window starts at a
// sample; when the process has allocated less than quietBudget since, for
// a whole quiet period, after a burst, and the heap holds enough spare
// memory (worthReleasing), it is released, and a new window starts after
// it.
func (r *Releaser) run(ctx context.Context) {
	tick := time.NewTicker(max(r.quiet/4, time.Second))
	defer tick.Stop()
	start, startedAt := r.read(), time.Now()
	var released uint64 // allocs at the last release (the start of the process counts as a burst)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := r.read()
		if now.allocs-start.allocs >= quietBudget(now.live) {
			start, startedAt = now, time.Now() // busy: the quiet period starts again
			continue
		}
		if time.Since(startedAt) < r.quiet || !burstSince(now, released) {
			continue
		}
		if !headroom(now) {
			// The live heap is the last collection's: when that ran
			// during the burst (responses in flight) it overstates what
			// is live now, and no collection may come for minutes while
			// idle. Collect once to judge this burst by what is live.
			r.collect()
			if now = r.read(); !headroom(now) {
				start, startedAt = now, time.Now()
				released = now.allocs // judged: the next needs a burst of its own
				continue
			}
		}
		r.release()
		r.released.Inc()
		r.bytes.Add(float64(now.spare))
		r.log.Debug("returned idle heap memory to the OS", "spare_mb", now.spare>>20, "live_mb", now.live>>20)
		start, startedAt = r.read(), time.Now()
		released = start.allocs
	}
}

// The runtime metrics a sample reads.
var sampleMetrics = []string{
	"/gc/heap/allocs:bytes",
	"/gc/heap/live:bytes",
	"/memory/classes/heap/free:bytes",
	"/memory/classes/heap/objects:bytes",
}

func readSample() sample {
	ms := make([]metrics.Sample, len(sampleMetrics))
	for i, name := range sampleMetrics {
		ms[i].Name = name
	}
	metrics.Read(ms)
	v := func(i int) uint64 {
		if ms[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return ms[i].Value.Uint64()
	}
	s := sample{allocs: v(0), live: v(1)}
	objects := v(3)
	// Unused space in spans in use (fragmentation) is not counted: a
	// collection does not return it.
	s.spare = v(2) + objects - min(objects, s.live)
	return s
}
