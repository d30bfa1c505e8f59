package files

import (
	"time"

	"github.com/navemesh/nave/shared/meshconfig"
)

// maxHoldWindows bounds how many debounce windows a removal waits for a
// file that never stops changing.
const maxHoldWindows = 10

// holdRemoval reports whether the live object o stays for now, as it is,
// though this load (at now, having seen files) yields it no more (r is a
// withdrawal) or yields a version of it that lacks something (r is a
// shrink). An editor that rewrites a file in place can be read half-way,
// cut at a line or document boundary: what the rest held would be
// removed and come back a moment later. So a removal waits while the
// object's file differs from what the last load saw of it (content, size,
// modification time, or being there at all), or the last load is less
// than a debounce window ago, or it came at once at the leading edge of a
// change (debounce.Leading: the writer may still be at it, so its view
// proves nothing); it applies once the file has stayed the same across a
// window, or after maxHoldWindows windows of a file that keeps changing.
// Adds, and updates that remove nothing, are never held
// (docs/decisions/035-a-half-written-file-never-shrinks-config.md). held
// collects the keys still held, with when they were first held.
//
// It reads the state of the last load (files, lastLoad, held), which only
// Run's goroutine touches.
func (s *Source) holdRemoval(o *meshconfig.Object, r removal, files map[string]fileState, now time.Time, held map[string]time.Time) bool {
	file, _ := splitOrigin(o.Origin)
	before, had := s.files[file]
	after, has := files[file]
	if had == has && before == after && now.Sub(s.lastLoad) >= s.opts.Debounce && !s.lastEarly {
		return false
	}
	k := keyOf(o)
	since, ok := s.held[k]
	if !ok {
		since = now
	}
	if now.Sub(since) >= maxHoldWindows*s.opts.Debounce {
		return false
	}
	held[k] = since
	args := []any{"file", file, "kind", o.Kind.Kind, "namespace", o.Namespace, "name", o.Name}
	if r == shrink {
		s.logger.Info("config update that removes content deferred until its file is stable", args...)
	} else {
		s.logger.Info("config withdrawal deferred until its file is stable", args...)
	}
	return true
}
