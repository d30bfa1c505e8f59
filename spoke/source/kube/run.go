package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/navemesh/nave/shared/debounce"
	"github.com/navemesh/nave/shared/meshconfig"
)

// Run watches the cluster until ctx is done, then stops every informer
// and returns nil. It publishes the complete set of valid objects once
// every usable kind has synced — never before: a kind that is forbidden,
// not served, or whose CRD is not installed is not waited for — and then
// again after every debounced batch of changes that alters the set.
// publish is called from Run's goroutine only, never concurrently; it
// owns the slice it is given.
//
// Run does not fail when the API server is unreachable: the informers
// retry, backing off, and Ready says what is awaited. Run may be called
// once.
func (s *Source) Run(ctx context.Context, publish func(objs []*meshconfig.Object)) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("kubernetes source: Run called twice")
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	for _, w := range s.kinds {
		if w.def.crd {
			continue
		}
		if err := s.startKind(ctx, &wg, w); err != nil {
			return fmt.Errorf("kubernetes source: %w", err)
		}
	}
	wg.Go(func() { s.watchCRDs(ctx, &wg) })
	s.logger.Info("kubernetes source started", "kinds", len(s.kinds), "namespaceSelector", s.opts.NamespaceSelector)

	b, start := newBuilder(s), time.Now()
	// Changes that never stop are still published, at least every ten
	// quiet periods (armed by the first change after the initial publish).
	deb := debounce.New(s.opts.DebounceEdge, s.opts.Debounce, 10*s.opts.Debounce)
	defer deb.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake:
			if !s.isPublished() {
				if s.initialSyncDone() {
					s.logger.Info("kubernetes source synced", "after", time.Since(start))
					if s.opts.OnSynced != nil {
						s.opts.OnSynced()
					}
					s.publishBuild(b, publish, true)
				}
				continue
			}
			deb.Event()
		case <-deb.C():
			s.publishBuild(b, publish, false)
		}
	}
}

func (s *Source) isPublished() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.published
}

// initialSyncDone reports whether discovery answered and no started kind
// is still awaited.
func (s *Source) initialSyncDone() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if !s.discovered {
		return false
	}
	for _, w := range s.kinds {
		if w.blocking() {
			return false
		}
	}
	return true
}

// publishBuild builds the object set, records it and publishes it,
// unless it equals the last one published. A panic in a build is logged
// and the build skipped: the next change retries it.
func (s *Source) publishBuild(b *builder, publish func([]*meshconfig.Object), initial bool) {
	start := time.Now()
	res, ok := s.safeBuild(b)
	if !ok {
		return
	}
	elapsed := time.Since(start)
	s.metrics.observe(res.objects, res.invalid, elapsed.Seconds())

	s.mu.Lock()
	unchanged := !initial && sameObjects(s.objects, res.objects)
	s.objects, s.rejected, s.counts = res.objects, res.rejected, res.counts
	s.mu.Unlock()
	if unchanged {
		s.logger.Debug("kubernetes objects unchanged", "objects", len(res.objects), "duration", elapsed)
		return
	}
	invalid := 0
	for _, n := range res.invalid {
		invalid += n
	}
	level := slog.LevelDebug
	if initial {
		level = slog.LevelInfo
	}
	s.logger.Log(context.Background(), level, "kubernetes objects published", "objects", len(res.objects), "invalid", invalid, "duration", elapsed)
	s.metrics.publishes.Inc()
	publish(slices.Clone(res.objects))
	if initial {
		s.mu.Lock()
		s.published = true
		s.mu.Unlock()
	}
}

func (s *Source) safeBuild(b *builder) (res buildResult, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			s.logger.Error("kubernetes object build panicked; skipped", "panic", fmt.Sprint(r))
			ok = false
		}
	}()
	return b.build(), true
}

// sameObjects reports whether two sorted object sets hold the same
// objects at the same versions.
func sameObjects(a, b []*meshconfig.Object) bool {
	return slices.EqualFunc(a, b, func(x, y *meshconfig.Object) bool {
		return x.Kind == y.Kind && x.Namespace == y.Namespace && x.Name == y.Name && x.Version == y.Version &&
			x.CreationTime.Equal(y.CreationTime)
	})
}
