package ca

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/navemesh/nave/shared/atomicfile"
)

// ErrConflict is matched (errors.Is) by a Replacer's error when the blobs
// it was to replace are no longer those the caller read: someone else
// changed the CA meanwhile. The caller reads again and decides anew.
var ErrConflict = errors.New("the CA was changed by someone else meanwhile")

// Replacer is implemented by a Store whose mesh CAs can change after
// their creation (a root rotation, see Authority.AddRoot). Replace sets
// mesh's blobs to next only if they are still exactly old (what the caller
// read with Get), else it stores nothing and returns an error matching
// ErrConflict: a compare-and-swap, so that two operators (or an operator
// and a hub creating the first root) never overwrite each other.
type Replacer interface {
	Replace(ctx context.Context, mesh string, old, next map[string][]byte) error
}

// sameBlobs reports whether a and b hold the same names with the same
// contents.
func sameBlobs(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for n, v := range a {
		w, ok := b[n]
		if !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

// Replace implements Replacer. Under the directory's exclusive lock it
// checks the files are old, writes every changed or new blob (each
// replaced whole, atomicfile.WriteSet), then removes the blobs next does
// not hold. A crash in between can leave a mix of the two sets; the
// Authority then refuses to load it and names the files, and running the
// same rotation step again finishes it.
func (s *DirStore) Replace(ctx context.Context, mesh string, old, next map[string][]byte) error {
	dir, names, unlock, err := s.lockForWrite(mesh, next)
	if err != nil {
		return err
	}
	defer unlock()
	cur, err := s.readBlobs(dir)
	if err != nil {
		return err
	}
	if !sameBlobs(cur, old) {
		return fmt.Errorf("ca store: %s: %w", dir, ErrConflict)
	}
	var files []atomicfile.File
	for _, n := range names {
		if v, ok := cur[n]; !ok || !bytes.Equal(v, next[n]) {
			files = append(files, atomicfile.File{Name: n, Data: next[n], Perm: 0o600})
		}
	}
	if len(files) > 0 {
		if err := atomicfile.WriteSet(dir, files); err != nil {
			return fmt.Errorf("ca store: %w", err)
		}
	}
	for n := range cur {
		if _, keep := next[n]; keep {
			continue
		}
		if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("ca store: %w", err)
		}
	}
	if err := atomicfile.SyncDir(dir); err != nil {
		return fmt.Errorf("ca store: %w", err)
	}
	return nil
}

// readBlobs reads the blob files of dir (the caller holds its lock).
func (s *DirStore) readBlobs(dir string) (map[string][]byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("ca store: %w", err)
	}
	blobs := map[string][]byte{}
	for _, e := range entries {
		if !blobNameRE.MatchString(e.Name()) || !e.Type().IsRegular() {
			continue
		}
		b, err := readLimited(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("ca store: %w", err)
		}
		blobs[e.Name()] = b
	}
	return blobs, nil
}

// Replace implements Replacer: it reads the Secret, checks its blobs are
// old, and updates it guarded by the resourceVersion it read, so that the
// API server refuses the update (Conflict, returned as ErrConflict) if
// anyone changed the Secret in between. Data keys that are not blob names
// are kept. It needs update on secrets in the namespace.
func (s *SecretStore) Replace(ctx context.Context, mesh string, old, next map[string][]byte) error {
	if err := checkMesh(mesh); err != nil {
		return fmt.Errorf("ca store: %w", err)
	}
	if _, err := blobNames(next); err != nil {
		return err
	}
	sec, err := s.client.Get(ctx, s.namespace, s.prefix+mesh)
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("ca store: secret %s: not found: %w", s.Location(mesh), ErrConflict)
	}
	if err != nil {
		return s.apiError("get", mesh, err)
	}
	cur := map[string][]byte{}
	data := map[string][]byte{}
	for n, b := range sec.Data {
		if blobNameRE.MatchString(n) {
			cur[n] = b
		} else {
			data[n] = b
		}
	}
	if !sameBlobs(cur, old) {
		return fmt.Errorf("ca store: secret %s: %w", s.Location(mesh), ErrConflict)
	}
	if sec.Immutable {
		return fmt.Errorf("ca store: secret %s is immutable: recreate it without immutable: true to rotate its root", s.Location(mesh))
	}
	for n, b := range next {
		data[n] = slices.Clone(b)
	}
	sec.Data = data
	err = s.client.Update(ctx, sec)
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return fmt.Errorf("ca store: secret %s: %w", s.Location(mesh), ErrConflict)
	}
	if err != nil {
		return s.apiError("update", mesh, err)
	}
	return nil
}
