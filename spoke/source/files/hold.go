package files

import (
	"time"

	"github.com/navemesh/nave/shared/meshconfig"
)

// maxHoldWindows bounds how many debounce windows a withdrawal waits for
// a file that never stops changing.
const maxHoldWindows = 10

// holdWithdrawal reports whether the live object o, which this load (at
// now, having seen files) no longer yields, stays for now. An editor that
// rewrites a file in place can be read half-way, cut at a document
// boundary: what the rest held would be withdrawn and come back a moment
// later. So a withdrawal waits while the object's file differs from what
// the last load saw of it (content, size, modification time, or being
// there at all) or the last load is less than a debounce window ago; it
// applies once the file has stayed the same across a window, or after
// maxHoldWindows windows of a file that keeps changing. Adds and updates
// are never held. held collects the keys still held, with when they were
// first held.
//
// It reads the state of the last load (files, lastLoad, held), which only
// Run's goroutine touches.
func (s *Source) holdWithdrawal(o *meshconfig.Object, files map[string]fileState, now time.Time, held map[string]time.Time) bool {
	file, _ := splitOrigin(o.Origin)
	before, had := s.files[file]
	after, has := files[file]
	if had == has && before == after && now.Sub(s.lastLoad) >= s.opts.Debounce {
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
	s.logger.Info("config withdrawal deferred until its file is stable", "file", file,
		"kind", o.Kind.Kind, "namespace", o.Namespace, "name", o.Name)
	return true
}
