package files

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/navemesh/nave/shared/meshconfig"
)

// loadResult is one load of the directory.
type loadResult struct {
	objects    []*meshconfig.Object   // valid: in path order from load, sorted and unique after settle
	rejections []meshconfig.Rejection // sorted after settle
	dirs       []string               // every directory walked, as reached
	files      map[string]fileState   // every YAML file found, by path relative to the root
}

// fileState is what a load saw of a file, to tell whether it changed
// between two loads. It is comparable.
type fileState struct {
	size  int64
	mtime int64 // Unix nanoseconds
	sum   [sha256.Size]byte
}

// load reads the whole tree. watch is called with every directory before
// its entries are read, so that a change made during the load is seen by
// the watcher. It fails only when the root itself cannot be read, or when
// the tree is larger than the limits.
//
// Every read goes through an os.Root: a symbolic link is followed only
// when it is relative and resolves inside the directory (as Kubernetes'
// ConfigMap volumes are made), so no link can bring in a file from
// elsewhere, even one swapped while the load runs.
func (s *Source) load(watch func(dir string)) (loadResult, error) {
	root, err := os.OpenRoot(s.dir)
	if err != nil {
		return loadResult{}, fmt.Errorf("read config directory %s: %w", s.dir, err)
	}
	defer root.Close()
	w := &walker{root: root, base: s.dir, opts: s.opts, watch: watch}
	if err := w.walkDir(".", 0); err != nil {
		return loadResult{}, fmt.Errorf("read config directory %s: %w", s.dir, err)
	}
	slices.SortFunc(w.files, func(a, b string) int { return strings.Compare(a, b) })

	res := loadResult{rejections: w.rejections, dirs: w.dirs, files: make(map[string]fileState, len(w.files))}
	for _, rel := range w.files {
		data, state, reason := readLimited(root, rel, s.opts.MaxFileBytes)
		res.files[rel] = state
		if reason != "" {
			res.rejections = append(res.rejections, meshconfig.Rejection{File: rel, Index: -1, Reason: reason})
			continue
		}
		objs, errs := meshconfig.DecodeYAML(data, rel)
		for _, e := range errs {
			res.rejections = append(res.rejections, e.Rejection())
		}
		for _, o := range objs {
			// Entries without a network take their label's, else the
			// cluster's (a changed object is a copy, versioned again).
			res.objects = append(res.objects, meshconfig.WithNetwork(o, s.opts.Network))
		}
	}
	return res, nil
}

// linkRule is the reason a symlink is not followed.
const linkRule = "symlink not followed: it is absolute or leads outside the config directory " +
	"(a link must be relative and stay inside the directory)"

// limitError is a tree too large to load: the whole load fails.
type limitError struct{ msg string }

func (e *limitError) Error() string { return e.msg }

// walker collects the YAML files of a tree, following the symlinks that
// the root allows. A directory reached twice (a symlink loop, or two
// links to one directory) is read once; the second link is rejected.
type walker struct {
	root       *os.Root
	base       string // the root's path, for the watches
	opts       Options
	watch      func(dir string)
	visited    []visit
	files      []string // slash-separated, relative to the root
	dirs       []string // as watched
	rejections []meshconfig.Rejection
}

type visit struct {
	fi  fs.FileInfo
	rel string
}

func (w *walker) walkDir(rel string, depth int) error {
	f, err := w.root.Open(rel)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	for _, v := range w.visited {
		if os.SameFile(v.fi, fi) {
			return fmt.Errorf("directory already loaded as %q (a symlink loop?)", v.rel)
		}
	}
	if len(w.visited) > w.opts.MaxDirs { // the root and MaxDirs below it
		return &limitError{fmt.Sprintf("more than %d directories below it (the limit); not loaded", w.opts.MaxDirs)}
	}
	w.visited = append(w.visited, visit{fi: fi, rel: rel})
	dir := filepath.Join(w.base, filepath.FromSlash(rel))
	w.dirs = append(w.dirs, dir)
	w.watch(dir)
	entries, err := f.ReadDir(-1)
	if err != nil {
		return err
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	for _, e := range entries {
		name := e.Name()
		// Hidden entries are skipped; so are Kubernetes' ConfigMap mount
		// internals ("..data", "..2024_01_01_..."), reached through the
		// links next to them instead.
		if strings.HasPrefix(name, ".") {
			continue
		}
		r := path.Join(rel, name)
		typ := e.Type()
		if typ&fs.ModeSymlink != 0 {
			fi, err := w.root.Stat(r)
			if err != nil {
				w.reject(r, linkReason(err))
				continue
			}
			typ = fi.Mode().Type()
		}
		switch {
		case typ.IsDir():
			if depth >= w.opts.MaxDepth {
				w.reject(r, fmt.Sprintf("directory not read: it is more than %d levels below the config directory (the limit)", w.opts.MaxDepth))
				continue
			}
			if err := w.walkDir(r, depth+1); err != nil {
				if le := (*limitError)(nil); errors.As(err, &le) {
					return err
				}
				w.reject(r, "cannot read directory: "+errReason(err))
			}
		case typ.IsRegular() && isYAML(name):
			if len(w.files) >= w.opts.MaxFiles {
				return &limitError{fmt.Sprintf("more than %d YAML files below it (the limit); not loaded", w.opts.MaxFiles)}
			}
			w.files = append(w.files, r)
		}
	}
	return nil
}

// linkReason says why a symlink cannot be followed: the root refuses it
// (not an OS error), or the OS could not resolve it.
func linkReason(err error) string {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return linkRule
	}
	return "cannot follow symlink: " + errReason(err)
}

func (w *walker) reject(rel, reason string) {
	w.rejections = append(w.rejections, meshconfig.Rejection{File: rel, Index: -1, Reason: reason})
}

func isYAML(name string) bool {
	ext := strings.ToLower(filepath.Ext(name))
	return ext == ".yaml" || ext == ".yml"
}

// readLimited reads a file of the root of at most limit bytes, or says
// why not, and what it saw of the file (what it could).
func readLimited(root *os.Root, name string, limit int64) ([]byte, fileState, string) {
	f, err := root.Open(name)
	if err != nil {
		return nil, fileState{}, "cannot open: " + linkReason(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fileState{}, "cannot stat: " + errReason(err)
	}
	state := fileState{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if fi.Size() > limit {
		return nil, state, fmt.Sprintf("file is %d bytes, larger than the limit %d", fi.Size(), limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, state, "cannot read: " + errReason(err)
	}
	if int64(len(data)) > limit {
		return nil, state, fmt.Sprintf("file is more than %d bytes, larger than the limit %d", limit, limit)
	}
	state.size, state.sum = int64(len(data)), sha256.Sum256(data)
	return data, state, ""
}

// errReason is an error without the absolute path that *fs.PathError
// adds: rejections name files relative to the directory.
func errReason(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// splitOrigin splits an object's origin, "file#index".
func splitOrigin(origin string) (string, int) {
	i := strings.LastIndexByte(origin, '#')
	if i < 0 {
		return origin, -1
	}
	var n int
	if _, err := fmt.Sscanf(origin[i+1:], "%d", &n); err != nil {
		return origin, -1
	}
	return origin[:i], n
}
