package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// watched is one watched kind at run time. Its fields are guarded by the
// Source's mu; def is immutable.
type watched struct {
	def       *kindDef
	informer  cache.SharedIndexInformer // nil until started
	missing   bool                      // discovery found no CRD for the kind
	synced    bool
	forbidden bool // listing was forbidden before the kind synced
	notFound  bool // the server did not serve the resource before the kind synced
	lastErr   string
	lastErrAt time.Time
	since     time.Time // when the informer started
}

// blocking reports whether the initial publish waits for the kind: its
// informer runs and has neither synced nor been given up on.
func (w *watched) blocking() bool {
	return w.informer != nil && !w.synced && !w.forbidden && !w.notFound
}

func (w *watched) state(started, discovered bool) string {
	switch {
	case w.synced:
		return StateSynced
	case w.forbidden:
		return StateForbidden
	case w.notFound:
		return StateNotFound
	case w.informer != nil:
		return StateSyncing
	case w.missing:
		return StateNotInstalled
	case !started:
		return StateNotStarted
	case w.def.crd && !discovered:
		return StateDiscovering
	}
	return StateNotStarted
}

// store returns the kind's informer cache, or nil before it started.
func (s *Source) store(name string) cache.Store {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, w := range s.kinds {
		if w.def.name == name && w.informer != nil {
			return w.informer.GetStore()
		}
	}
	return nil
}

// startKind starts the kind's informer; it runs until ctx is done and
// wg tracks it.
func (s *Source) startKind(ctx context.Context, wg *sync.WaitGroup, w *watched) error {
	inf := w.def.informer(s.clients)
	transform := w.def.transform
	if w.def.sharingTransform != nil {
		transform = w.def.sharingTransform(s.labelSets)
	}
	if err := inf.SetTransform(transform); err != nil {
		return fmt.Errorf("%s informer: %w", w.def.name, err)
	}
	if err := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, _ *cache.Reflector, err error) {
		s.watchError(ctx, w, err)
	}); err != nil {
		return fmt.Errorf("%s informer: %w", w.def.name, err)
	}
	events := s.metrics.events.WithLabelValues(w.def.name)
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) {
			events.Inc()
			s.poke()
		},
		UpdateFunc: func(old, cur any) {
			events.Inc()
			if sameVersion(old, cur) || (w.def.same != nil && w.def.same(old, cur)) {
				return
			}
			s.poke()
		},
		DeleteFunc: func(any) {
			events.Inc()
			s.poke()
		},
	}); err != nil {
		return fmt.Errorf("%s informer: %w", w.def.name, err)
	}

	s.mu.Lock()
	w.informer, w.since = inf, time.Now()
	s.updateNotSyncedLocked()
	s.mu.Unlock()
	s.logger.Debug("kind watch started", "kind", w.def.name, "resource", w.def.resource())

	wg.Go(func() { inf.RunWithContext(ctx) })
	wg.Go(func() {
		select {
		case <-ctx.Done():
		case <-inf.HasSyncedChecker().Done():
			s.kindSynced(w)
		}
	})
	return nil
}

// sameVersion reports an update that is a resync of an unchanged object.
func sameVersion(old, cur any) bool {
	a, ok1 := old.(metav1.Object)
	b, ok2 := cur.(metav1.Object)
	return ok1 && ok2 && a.GetResourceVersion() != "" && a.GetResourceVersion() == b.GetResourceVersion()
}

func (s *Source) kindSynced(w *watched) {
	s.mu.Lock()
	after := time.Since(w.since)
	wasForbidden := w.forbidden || w.notFound
	w.synced, w.forbidden, w.notFound, w.lastErr, w.lastErrAt = true, false, false, "", time.Time{}
	s.updateNotSyncedLocked()
	s.mu.Unlock()
	if wasForbidden {
		s.logger.Info("kind synced after an error; its objects join as changes", "kind", w.def.name, "after", after)
	} else {
		s.logger.Debug("kind synced", "kind", w.def.name, "after", after)
	}
	s.poke()
}

// watchError handles an error of a kind's list or watch. The informer
// retries by itself, backing off; this records the error for Status and
// Ready, and stops the initial publish from waiting for a kind that is
// forbidden or not served.
func (s *Source) watchError(ctx context.Context, w *watched, err error) {
	switch {
	case ctx.Err() != nil, errors.Is(err, context.Canceled):
		return // stopping
	case apierrors.IsResourceExpired(err), apierrors.IsGone(err), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		// A watch that ended or expired: the informer lists again.
		s.logger.Debug("kind watch restarted", "kind", w.def.name, "err", err)
		return
	}
	msg := err.Error()
	forbidden, notFound := apierrors.IsForbidden(err), apierrors.IsNotFound(err)
	switch {
	case forbidden:
		msg = fmt.Sprintf("forbidden: cannot list %s: grant get/list/watch", w.def.resource())
	case notFound:
		msg = fmt.Sprintf("the API server does not serve %s", w.def.resource())
	}
	s.mu.Lock()
	changed := w.lastErr != msg
	w.lastErr, w.lastErrAt = msg, time.Now()
	givesUp := !w.synced && (forbidden && !w.forbidden || notFound && !w.notFound)
	if !w.synced {
		w.forbidden = w.forbidden || forbidden
		w.notFound = w.notFound || notFound
	}
	s.mu.Unlock()

	switch {
	case givesUp:
		s.logger.Warn("kind cannot be watched; the others are published without it", "kind", w.def.name,
			"resource", w.def.resource(), "reason", msg, "err", err)
		s.poke()
	case changed:
		s.logger.Warn("kind watch failed; retrying", "kind", w.def.name, "resource", w.def.resource(), "err", err)
	default:
		s.logger.Debug("kind watch failed; retrying", "kind", w.def.name, "resource", w.def.resource(), "err", err)
	}
}

// updateNotSyncedLocked sets the kinds-not-synced gauge. s.mu is held.
func (s *Source) updateNotSyncedLocked() {
	n := 0
	for _, w := range s.kinds {
		if !w.synced {
			n++
		}
	}
	s.metrics.notSynced.Set(float64(n))
}

// poke tells Run that something changed.
func (s *Source) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}
