package ca

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/navemesh/nave/shared/atomicfile"
)

// Deleter is implemented by a Store that can destroy a mesh's CA: Delete
// removes every blob of mesh (its keys with them), so that the next Load
// of the name generates a new root. Deleting a mesh with no blobs is not
// an error.
type Deleter interface {
	Delete(ctx context.Context, mesh string) error
}

// Forget drops mesh's CA from the Authority: from then on nothing is
// signed for mesh, its roots verify nothing, and its trust domain names
// no mesh (a certificate of it is refused as of an unknown mesh). The
// Store keeps the CA: a later Load of the mesh finds it again. It reports
// whether mesh was loaded.
func (a *Authority) Forget(mesh string) bool {
	a.loadMu.Lock()
	defer a.loadMu.Unlock()
	a.mu.Lock()
	c, ok := a.meshes[mesh]
	if ok {
		delete(a.meshes, mesh)
		if a.byTD[c.mesh.TrustDomain] == mesh {
			delete(a.byTD, c.mesh.TrustDomain)
		}
	}
	a.mu.Unlock()
	if ok {
		a.metrics.forget(mesh)
		a.log.Info("ca forgotten", "mesh", mesh, "trust_domain", c.mesh.TrustDomain)
	}
	return ok
}

// Destroy forgets mesh's CA (Forget) and deletes it from the Store, keys
// and all: a mesh re-created with the name gets a new root. The Store must
// be a Deleter.
func (a *Authority) Destroy(ctx context.Context, mesh string) error {
	if err := checkMesh(mesh); err != nil {
		return fmt.Errorf("ca: %w", err)
	}
	d, ok := a.store.(Deleter)
	if !ok {
		return fmt.Errorf("ca: mesh %q: the CA store cannot delete a CA", mesh)
	}
	a.Forget(mesh)
	a.loadMu.Lock()
	defer a.loadMu.Unlock()
	if err := d.Delete(ctx, mesh); err != nil {
		return fmt.Errorf("ca: mesh %q: %w", mesh, err)
	}
	a.log.Info("ca destroyed", "mesh", mesh)
	return nil
}

// Delete implements Deleter. Under the directory's exclusive lock it
// removes every blob of mesh (the directory and its lock stay, empty of
// blobs: a concurrent Create waits on that lock, and then finds the place
// free). A read-only directory (a plugged-in CA on a Secret volume) is
// refused with the reason.
func (s *DirStore) Delete(_ context.Context, mesh string) error {
	if err := checkMesh(mesh); err != nil {
		return fmt.Errorf("ca store: %w", err)
	}
	dir := filepath.Join(s.dir, mesh)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	unlock, err := lockDir(dir, true)
	if err != nil {
		return fmt.Errorf("ca store: lock %s: %w", dir, err)
	}
	defer unlock()
	cur, err := s.readBlobs(dir)
	if err != nil {
		return err
	}
	for n := range cur {
		if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("ca store: %w", err)
		}
	}
	if err := atomicfile.SyncDir(dir); err != nil {
		return fmt.Errorf("ca store: %w", err)
	}
	return nil
}
