package files

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/navemesh/nave/shared/meshconfig"
)

// loadResult is one load of the directory.
type loadResult struct {
	objects    []*meshconfig.Object // valid, sorted
	rejections []Rejection          // sorted
	dirs       []string             // every directory walked, as reached
}

// load reads the whole tree. watch is called with every directory before
// its entries are read, so that a change made during the load is seen by
// the watcher. It fails only when the root itself cannot be read.
func (s *Source) load(watch func(dir string)) (loadResult, error) {
	w := &walker{watch: watch, visited: map[string]string{}}
	if err := w.walkDir(s.dir, "."); err != nil {
		return loadResult{}, fmt.Errorf("read config directory %s: %w", s.dir, err)
	}
	slices.SortFunc(w.files, func(a, b fileRef) int { return strings.Compare(a.rel, b.rel) })

	var (
		res   = loadResult{rejections: w.rejections, dirs: w.dirs}
		first = map[string]string{} // kind namespace/name -> origin of the object kept
	)
	for _, f := range w.files {
		data, reason := readLimited(f.path, s.opts.MaxFileBytes)
		if reason != "" {
			res.rejections = append(res.rejections, Rejection{File: f.rel, Index: -1, Reason: reason})
			continue
		}
		objs, errs := meshconfig.DecodeYAML(data, f.rel)
		for _, e := range errs {
			res.rejections = append(res.rejections, fromObjectError(e))
		}
		for _, o := range objs {
			key := o.Kind.Kind + " " + o.Key()
			if at, dup := first[key]; dup {
				file, index := splitOrigin(o.Origin)
				res.rejections = append(res.rejections, Rejection{
					File: file, Index: index, Kind: o.Kind.Kind, Namespace: o.Namespace, Name: o.Name,
					Reason: fmt.Sprintf("duplicate %s %s: the first one, at %s, is kept", o.Kind.Kind, o.Key(), at),
				})
				continue
			}
			first[key] = o.Origin
			res.objects = append(res.objects, o)
		}
	}
	sortObjects(res.objects)
	sortRejections(res.rejections)
	return res, nil
}

type fileRef struct {
	rel  string // slash-separated, relative to the root
	path string // as reached on disk
}

// walker collects the YAML files of a tree, following symlinks to files
// and directories. A directory reached twice (a symlink loop, or two
// links to one directory) is read once; the second link is rejected.
type walker struct {
	watch      func(dir string)
	visited    map[string]string // real path -> rel of the first link to it
	files      []fileRef
	dirs       []string
	rejections []Rejection
}

func (w *walker) walkDir(dir, rel string) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	if at, seen := w.visited[real]; seen {
		return fmt.Errorf("directory already loaded as %q (a symlink loop?)", at)
	}
	w.visited[real] = rel
	w.dirs = append(w.dirs, dir)
	w.watch(dir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		// Hidden entries are skipped; so are Kubernetes' ConfigMap mount
		// internals ("..data", "..2024_01_01_..."), reached through the
		// links next to them instead.
		if strings.HasPrefix(name, ".") {
			continue
		}
		p, r := filepath.Join(dir, name), path.Join(rel, name)
		typ := e.Type()
		if typ&fs.ModeSymlink != 0 {
			fi, err := os.Stat(p)
			if err != nil {
				w.reject(r, "cannot follow symlink: "+errReason(err))
				continue
			}
			typ = fi.Mode().Type()
		}
		switch {
		case typ.IsDir():
			if err := w.walkDir(p, r); err != nil {
				w.reject(r, "cannot read directory: "+errReason(err))
			}
		case typ.IsRegular() && isYAML(name):
			w.files = append(w.files, fileRef{rel: r, path: p})
		}
	}
	return nil
}

func (w *walker) reject(rel, reason string) {
	w.rejections = append(w.rejections, Rejection{File: rel, Index: -1, Reason: reason})
}

func isYAML(name string) bool {
	ext := strings.ToLower(filepath.Ext(name))
	return ext == ".yaml" || ext == ".yml"
}

// readLimited reads a file of at most limit bytes, or says why not.
func readLimited(name string, limit int64) ([]byte, string) {
	f, err := os.Open(name)
	if err != nil {
		return nil, "cannot open: " + errReason(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, "cannot stat: " + errReason(err)
	}
	if fi.Size() > limit {
		return nil, fmt.Sprintf("file is %d bytes, larger than the limit %d", fi.Size(), limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, "cannot read: " + errReason(err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Sprintf("file is more than %d bytes, larger than the limit %d", limit, limit)
	}
	return data, ""
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
