// Package files is the spoke's fs:// config source: it loads the Istio
// config objects of a directory of YAML files and reloads them whenever
// the directory changes.
package files

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/navemesh/nave/shared/debounce"
	"github.com/navemesh/nave/shared/meshconfig"
)

// Defaults for zero Options fields.
const (
	DefaultDebounce     = 100 * time.Millisecond
	DefaultMaxFileBytes = 4 << 20
	DefaultMaxDepth     = 16
	DefaultMaxDirs      = 1000
	DefaultMaxFiles     = 10000
)

// Options tune a Source. Zero fields take the defaults above.
type Options struct {
	// Debounce is how long the directory must stay quiet after a change
	// before it is reloaded.
	Debounce time.Duration
	// DebounceEdge is the debounce's edge: debounce.Leading reloads at the
	// first change after a quiet period (its withdrawals are held all the
	// same, holdWithdrawal); the zero value is debounce.Trailing.
	DebounceEdge debounce.Edge
	// MaxFileBytes is the size above which a file is rejected unread.
	MaxFileBytes int64
	// MaxDepth is how many levels of directories below the source's
	// directory are read; a deeper directory is rejected unread.
	MaxDepth int
	// MaxDirs and MaxFiles bound the directories and YAML files of the
	// tree: a larger tree is not loaded at all (an error, like an
	// unreadable directory), so that a directory pointed at the wrong
	// place does not walk a whole file system.
	MaxDirs, MaxFiles int
	// Network is the cluster's network: the network of every
	// WorkloadEntry and ServiceEntry endpoint that has none after its own
	// network field and topology.istio.io/network labels. Empty: none.
	Network string
}

func (o Options) withDefaults() Options {
	if o.Debounce <= 0 {
		o.Debounce = DefaultDebounce
	}
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = DefaultMaxFileBytes
	}
	if o.MaxDepth <= 0 {
		o.MaxDepth = DefaultMaxDepth
	}
	if o.MaxDirs <= 0 {
		o.MaxDirs = DefaultMaxDirs
	}
	if o.MaxFiles <= 0 {
		o.MaxFiles = DefaultMaxFiles
	}
	return o
}

// Source loads and watches a directory. Run drives it, once; Rejections,
// Objects and Loaded may be called from any goroutine at any time.
type Source struct {
	dir     string
	opts    Options
	logger  *slog.Logger
	metrics *metrics
	running atomic.Bool

	// What the last load saw, for holdRemoval; only Run's goroutine
	// touches these.
	files    map[string]fileState
	lastLoad time.Time
	// lastEarly: the last load came at the leading edge of a change.
	lastEarly bool
	held      map[string]time.Time // object key -> when its removal was first held

	mu         sync.RWMutex
	loaded     bool
	objects    []*meshconfig.Object
	rejections []meshconfig.Rejection
}

// New makes a source for dir. It registers the source's metrics on reg
// (none when reg is nil) and fails if they are already registered. A
// missing directory is Run's error, not New's.
func New(dir string, opts Options, logger *slog.Logger, reg prometheus.Registerer) (*Source, error) {
	if dir == "" {
		return nil, errors.New("files source: directory is empty")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("files source %s: %w", dir, err)
	}
	return &Source{
		dir:     filepath.Clean(dir),
		opts:    opts.withDefaults(),
		logger:  logger.With("dir", dir),
		metrics: m,
	}, nil
}

// Rejections returns the rejections of the last load, sorted by file,
// document index, kind, namespace and name. The slice is the caller's.
func (s *Source) Rejections() []meshconfig.Rejection {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.rejections)
}

// Objects returns the valid objects of the last load, sorted by kind,
// namespace and name. The slice is the caller's; the objects are shared
// and must not be modified.
func (s *Source) Objects() []*meshconfig.Object {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.objects)
}

// Loaded reports whether the first load has completed.
func (s *Source) Loaded() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.loaded
}

func (s *Source) setState(objs []*meshconfig.Object, rejections []meshconfig.Rejection) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.objects, s.rejections, s.loaded = objs, rejections, true
}

func sortObjects(objs []*meshconfig.Object) {
	slices.SortFunc(objs, func(a, b *meshconfig.Object) int {
		return cmp.Or(
			cmp.Compare(a.Kind.Kind, b.Kind.Kind),
			cmp.Compare(a.Namespace, b.Namespace),
			cmp.Compare(a.Name, b.Name),
		)
	})
}
