package files

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/navemesh/nave/shared/debounce"
	"github.com/navemesh/nave/shared/meshconfig"
	"github.com/navemesh/nave/shared/retry"
)

// Bounds of the retry delay while the directory itself cannot be read.
const (
	minRetry = 250 * time.Millisecond
	maxRetry = 30 * time.Second
)

// Run loads the directory, calls publish with the complete set of valid
// objects, then watches the directory and every directory below it and,
// after every debounced change, reloads everything and publishes again,
// until ctx is done (it then returns nil). publish is called from Run's
// goroutine only, never concurrently; it owns the slice it is given.
//
// Run fails at once when the directory is missing or unreadable, or holds
// more than the limits (Options). If it becomes so later (or a reload
// panics), the last objects stay published and Run retries, backing off,
// until a reload succeeds. Run may be called again after it returned, but
// not concurrently.
//
// Adds, and updates that remove nothing, publish at the first reload that
// sees them; a withdrawal, or an update that removes something, may wait
// a few debounce windows for its file to settle (holdRemoval).
func (s *Source) Run(ctx context.Context, publish func(objs []*meshconfig.Object)) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("files source: already running")
	}
	defer s.running.Store(false)
	fi, err := os.Stat(s.dir)
	if err != nil {
		return fmt.Errorf("config directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("config directory %s is not a directory", s.dir)
	}
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch config directory %s: %w", s.dir, err)
	}
	defer watcher.Close()

	if err := s.reload(watcher, false, publish); err != nil {
		return err
	}
	var lastEvent time.Time // of the directory, for early

	// A directory that never stops changing is still reloaded, at least
	// every ten quiet periods.
	deb := debounce.New(s.opts.DebounceEdge, s.opts.Debounce, 10*s.opts.Debounce)
	defer deb.Stop()
	// again reloads without a change: after a failed reload (backing
	// off), or a window later while a withdrawal is held.
	again := time.NewTimer(time.Hour)
	again.Stop()
	defer again.Stop()
	backoff := retry.Policy{Initial: minRetry, Max: maxRetry, Multiplier: 2, Jitter: -1}.New()
	if len(s.held) > 0 {
		again.Reset(s.opts.Debounce)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-watcher.Events:
			if !ok {
				return errors.New("files source: watcher closed")
			}
			s.logger.Debug("config directory changed", "path", ev.Name, "op", ev.Op.String())
			lastEvent = time.Now()
			deb.Event()
			continue
		case err, ok := <-watcher.Errors:
			if !ok {
				return errors.New("files source: watcher closed")
			}
			// An overflow loses events: a reload catches up with them all.
			s.logger.Warn("config watch error", "err", err)
			lastEvent = time.Now()
			deb.Event()
			continue
		case <-deb.C():
		case <-again.C:
			if deb.Pending() {
				continue // the debounced change reloads
			}
		}
		again.Stop()
		// On the leading edge a reload may come at once, while a file is
		// being written: it cannot show that a file is stable.
		early := s.opts.DebounceEdge == debounce.Leading && time.Since(lastEvent) < s.opts.Debounce
		if err := s.reload(watcher, early, publish); err != nil {
			wait := backoff.NextBackOff()
			s.logger.Warn("config reload failed, keeping the last objects", "err", err, "retry", wait)
			again.Reset(wait)
			continue
		}
		backoff.Reset()
		if len(s.held) > 0 {
			// Look again in a window: withdraw, or keep holding.
			again.Reset(s.opts.Debounce)
		}
	}
}

// reload loads the directory, brings the watches in line with the
// directories it holds, records and logs the result, and publishes it;
// early says the directory changed less than a debounce window ago (the
// leading edge), so that the next reload does not take this one's view of
// a file as proof that it is stable. A panic on the way is an error: the
// loop outlives one bad reload.
func (s *Source) reload(watcher *fsnotify.Watcher, early bool, publish func([]*meshconfig.Object)) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("config reload panicked: %v", r)
		}
	}()
	start := time.Now()
	res, err := s.load(func(dir string) {
		if err := watcher.Add(dir); err != nil {
			s.logger.Warn("cannot watch config directory", "path", dir, "err", err)
		}
	})
	if err != nil {
		return err
	}
	s.unwatchGone(watcher, res.dirs)
	held := map[string]time.Time{}
	settle(s.Objects(), &res,
		func(o *meshconfig.Object, r removal) bool { return s.holdRemoval(o, r, res.files, start, held) },
		s.logTakeover)
	s.files, s.lastLoad, s.lastEarly, s.held = res.files, start, early, held
	elapsed := time.Since(start)

	for _, r := range res.rejections {
		s.logger.Warn("config object rejected", "file", r.File, "index", r.Index, "kind", r.Kind,
			"namespace", r.Namespace, "name", r.Name, "field", r.Field, "reason", r.Reason)
	}
	s.logger.Info("config loaded", "objects", len(res.objects), "rejected", len(res.rejections), "duration", elapsed)
	s.metrics.observe(res.objects, len(res.rejections), elapsed.Seconds())
	s.setState(res.objects, res.rejections)

	publish(slices.Clone(res.objects))
	return nil
}

// unwatchGone drops the watches of directories the last load did not
// reach (a removed symlink, a renamed directory).
func (s *Source) unwatchGone(watcher *fsnotify.Watcher, dirs []string) {
	keep := make(map[string]bool, len(dirs))
	for _, d := range dirs {
		keep[d] = true
	}
	for _, w := range watcher.WatchList() {
		if !keep[w] {
			// The directory may be gone already, its watch with it.
			_ = watcher.Remove(w)
		}
	}
}
