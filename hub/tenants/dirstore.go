package tenants

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/navemesh/nave/hub/ca"
	"github.com/navemesh/nave/shared/atomicfile"
)

// StateSubdir is the subdirectory of the hub's state dir that a dir store
// keeps the meshes in.
const StateSubdir = "meshes"

// dirBackend keeps the meshes in a directory (state.dir/meshes):
//
//	<name>.yaml           the mesh's spec, as `navectl mesh create -f` takes it:
//	                      a vendor may write (or sync from git) these files
//	status/<name>.json    the hub's record of the mesh: UID, generation, phase
//	seeded/<name>         ca.meshes entry <name> was seeded once
//
// Every write goes to a temporary file renamed into place, so readers
// never see half a file; writes take the directory's flock (as the CA
// DirStore does), so a create of an existing file fails and a conditional
// update compares the content it replaces. Safe for concurrent use, also
// by processes sharing the directory.
type dirBackend struct{ dir string }

func openDirBackend(stateDir string) (*dirBackend, error) {
	if stateDir == "" {
		return nil, errors.New("meshes: hub state dir not set")
	}
	b := &dirBackend{dir: filepath.Join(stateDir, StateSubdir)}
	for _, sub := range []string{"", kindStatus, kindSeeded} {
		if err := os.MkdirAll(filepath.Join(b.dir, sub), 0o700); err != nil {
			return nil, fmt.Errorf("meshes: %w", err)
		}
	}
	return b, nil
}

func (b *dirBackend) path(kind, name string) string {
	switch kind {
	case kindSpec:
		return filepath.Join(b.dir, name+".yaml")
	case kindStatus:
		return filepath.Join(b.dir, kindStatus, name+".json")
	}
	return filepath.Join(b.dir, kind, name)
}

func (b *dirBackend) where(kind, name string) string { return b.path(kind, name) }

func (b *dirBackend) list(_ context.Context, kind string) ([]blob, error) {
	dir, suffix := filepath.Dir(b.path(kind, "x")), strings.TrimPrefix(filepath.Base(b.path(kind, "x")), "x")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("meshes: %w", err)
	}
	var out []blob
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), suffix)
		if e.IsDir() || !ok || name == "" || strings.HasPrefix(e.Name(), atomicfile.TempPrefix) || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		bl, err := b.get(context.Background(), kind, name)
		if errors.Is(err, errNotFound) {
			continue // removed while listing
		}
		if err != nil {
			return nil, err
		}
		out = append(out, bl)
	}
	return out, nil
}

func (b *dirBackend) get(_ context.Context, kind, name string) (blob, error) {
	p := b.path(kind, name)
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return blob{}, fmt.Errorf("%s: %w", p, errNotFound)
	}
	if err != nil {
		return blob{}, fmt.Errorf("meshes: %w", err)
	}
	return blob{name: name, data: data, version: contentVersion(data)}, nil
}

// locked runs fn holding the directory's lock.
func (b *dirBackend) locked(fn func() error) error {
	unlock, err := ca.LockDir(b.dir)
	if err != nil {
		return fmt.Errorf("meshes: lock %s: %w", b.dir, err)
	}
	defer unlock()
	return fn()
}

func (b *dirBackend) create(ctx context.Context, kind, name string, data []byte) error {
	return b.locked(func() error {
		switch _, err := b.get(ctx, kind, name); {
		case err == nil:
			return fmt.Errorf("%s: %w", b.path(kind, name), errExists)
		case !errors.Is(err, errNotFound):
			return err
		}
		return b.write(kind, name, data)
	})
}

func (b *dirBackend) update(ctx context.Context, kind, name string, data []byte, version string) error {
	return b.locked(func() error {
		cur, err := b.get(ctx, kind, name)
		if err != nil {
			return err
		}
		if version != "" && cur.version != version {
			return fmt.Errorf("%s: %w", b.path(kind, name), errConflict)
		}
		return b.write(kind, name, data)
	})
}

func (b *dirBackend) remove(ctx context.Context, kind, name, version string) error {
	return b.locked(func() error {
		cur, err := b.get(ctx, kind, name)
		if errors.Is(err, errNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if version != "" && cur.version != version {
			return fmt.Errorf("%s: %w", b.path(kind, name), errConflict)
		}
		if err := os.Remove(b.path(kind, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("meshes: %w", err)
		}
		return atomicfile.SyncDir(filepath.Dir(b.path(kind, name)))
	})
}

func (b *dirBackend) write(kind, name string, data []byte) error {
	mode := os.FileMode(0o600)
	if kind == kindSpec {
		mode = 0o644 // a spec holds no secret
	}
	if err := atomicfile.Write(b.path(kind, name), data, mode); err != nil {
		return fmt.Errorf("meshes: %w", err)
	}
	return nil
}
