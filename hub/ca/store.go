package ca

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"

	"github.com/navemesh/nave/shared/atomicfile"
)

// Names of the blobs a mesh's CA is kept in. The plugged-in names are
// Istio's cacerts layout.
const (
	// FileCACert, FileCAKey, FileCertChain and FileRootCert make up a
	// plugged-in CA: the signing (intermediate) certificate and its key,
	// the chain from it up to the root, and the root(s).
	FileCACert    = "ca-cert.pem"
	FileCAKey     = "ca-key.pem"
	FileCertChain = "cert-chain.pem"
	FileRootCert  = "root-cert.pem"
	// FileRootKey is the key of a root nave generated itself (kept beside
	// FileRootCert). A plugged-in CA's root key is never given to nave.
	FileRootKey = "root-key.pem"
)

// ErrExist is matched (errors.Is) by a Store's error when Create finds a
// blob it was to create already there.
var ErrExist = fs.ErrExist

// maxBlobSize bounds what DirStore reads of one file; CA material is a few
// KiB.
const maxBlobSize = 1 << 20

// Store keeps the CA material of meshes as named PEM blobs, one set of
// names per mesh. It is the only place the Authority reads or writes keys,
// so where they live is the Store's choice:
//
//   - DirStore keeps them in a directory per mesh, for one hub or hub
//     replicas that share a volume;
//   - a Store backed by a Kubernetes Secret per mesh (each name a key of
//     the Secret's data) implements the same contract and lets the hub's
//     replicas share one root: Get reads the Secret, which is one atomic
//     read; Create creates the Secret (or updates it with its
//     resourceVersion as precondition), which the API server applies
//     all-or-nothing and refuses with AlreadyExists or Conflict when
//     another replica won — Create then returns an error matching ErrExist.
//
// Implementations must be safe for concurrent use, also by several
// processes sharing the backing storage.
type Store interface {
	// Get returns every blob of mesh, by name, as one consistent view: it
	// never shows part of the set of a concurrent Create. A mesh with no
	// blobs gives an empty map and no error.
	Get(ctx context.Context, mesh string) (map[string][]byte, error)
	// Create stores blobs (name → content) for mesh only if none of the
	// names exists yet, all or nothing. If any name exists, it stores
	// nothing and returns an error matching ErrExist: the caller then Gets
	// what the winner wrote.
	Create(ctx context.Context, mesh string, blobs map[string][]byte) error
}

// Locator is implemented by a Store that can say where a mesh's blobs are
// (a directory, a Secret's namespace/name); the Authority's errors then
// name the place as well as the blob.
type Locator interface {
	Location(mesh string) string
}

// DirStore is a Store in a directory: mesh m's blob n is the file
// <dir>/<m>/<n>. It creates directories with mode 0700 and files with mode
// 0600. A file is written under a temporary name, synced and renamed into
// place, and the directory is synced, so a crash leaves each blob whole or
// absent.
//
// Create holds an exclusive flock on <dir>/<m>/.lock while it checks and
// writes, and Get a shared one while it reads, so Authorities racing to
// create a mesh's root, in one process or in several sharing the
// directory, end with one root and never read half of it. (A directory
// that cannot be written to, such as a read-only Secret volume holding a
// plugged-in CA, is read without the lock: nothing can be creating in it.)
// A crash between the renames of one Create can leave part of a set; the
// Authority then refuses to start and names the files.
//
// DirStore is safe for concurrent use.
type DirStore struct {
	dir string
}

// NewDirStore returns a DirStore rooted at dir, creating dir (mode 0700) if
// it does not exist.
func NewDirStore(dir string) (*DirStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("ca store: %w", err)
	}
	return &DirStore{dir: dir}, nil
}

// Location returns the directory of mesh's blobs (see Locator).
func (s *DirStore) Location(mesh string) string { return filepath.Join(s.dir, mesh) }

var blobNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`)

// blobNames checks the names of blobs a Store is to create and returns
// them sorted.
func blobNames(blobs map[string][]byte) ([]string, error) {
	if len(blobs) == 0 {
		return nil, errors.New("ca store: create: no blobs")
	}
	names := make([]string, 0, len(blobs))
	for name := range blobs {
		if !blobNameRE.MatchString(name) {
			return nil, fmt.Errorf("ca store: blob name %q: want [a-z0-9][a-z0-9._-]*, at most 128 bytes", name)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	return names, nil
}

func checkMesh(mesh string) error {
	if err := validateLabel(mesh); err != nil {
		return fmt.Errorf("mesh %q: %w", mesh, err)
	}
	return nil
}

// Get implements Store. It reads the regular files of the mesh's directory
// whose names are blob names (lowercase, not starting with a dot).
func (s *DirStore) Get(_ context.Context, mesh string) (map[string][]byte, error) {
	if err := checkMesh(mesh); err != nil {
		return nil, fmt.Errorf("ca store: %w", err)
	}
	dir := filepath.Join(s.dir, mesh)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string][]byte{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ca store: %w", err)
	}
	unlock, err := lockDir(dir, false)
	if err != nil && !errors.Is(err, fs.ErrPermission) && !errors.Is(err, syscallEROFS) && !errors.Is(err, errors.ErrUnsupported) {
		return nil, fmt.Errorf("ca store: lock %s: %w", dir, err)
	}
	if err == nil {
		defer unlock()
		// Read the listing again: a Create may have finished while we
		// waited for the lock.
		if entries, err = os.ReadDir(dir); err != nil {
			return nil, fmt.Errorf("ca store: %w", err)
		}
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

func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxBlobSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxBlobSize {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxBlobSize)
	}
	return b, nil
}

// lockForWrite checks mesh and the names of blobs, creates the mesh's
// directory if needed and takes its lock for writing: it returns the
// directory, the blob names in order and the unlock function.
func (s *DirStore) lockForWrite(mesh string, blobs map[string][]byte) (dir string, names []string, unlock func(), err error) {
	if err := checkMesh(mesh); err != nil {
		return "", nil, nil, fmt.Errorf("ca store: %w", err)
	}
	if names, err = blobNames(blobs); err != nil {
		return "", nil, nil, err
	}
	dir = filepath.Join(s.dir, mesh)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, nil, fmt.Errorf("ca store: %w", err)
	}
	if unlock, err = lockDir(dir, true); err != nil {
		return "", nil, nil, fmt.Errorf("ca store: lock %s: %w", dir, err)
	}
	return dir, names, unlock, nil
}

// Create implements Store.
func (s *DirStore) Create(_ context.Context, mesh string, blobs map[string][]byte) error {
	dir, names, unlock, err := s.lockForWrite(mesh, blobs)
	if err != nil {
		return err
	}
	defer unlock()

	for _, name := range names {
		_, err := os.Lstat(filepath.Join(dir, name))
		if err == nil {
			return fmt.Errorf("ca store: %s: %w", filepath.Join(dir, name), ErrExist)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("ca store: %w", err)
		}
	}
	// A crash leaves part of the set only if it falls between two renames.
	files := make([]atomicfile.File, len(names))
	for i, name := range names {
		files[i] = atomicfile.File{Name: name, Data: blobs[name], Perm: 0o600}
	}
	if err := atomicfile.WriteSet(dir, files); err != nil {
		return fmt.Errorf("ca store: %w", err)
	}
	if err := atomicfile.SyncDir(dir); err != nil {
		return fmt.Errorf("ca store: %w", err)
	}
	return nil
}
