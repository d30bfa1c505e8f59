// Package atomicfile writes files so that a reader (another goroutine,
// process or host on a shared volume) sees either the old content or the
// new, never a part: the data goes to a temporary file in the same
// directory, is synced, and is renamed over the target.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// TempPrefix starts the name of every temporary file; directory listings
// skip names that start with it.
const TempPrefix = "."

// Write replaces path with data, with mode perm. The directory must exist.
func Write(path string, data []byte, perm os.FileMode) error {
	return WriteFunc(path, perm, writeData(data))
}

// WriteFunc replaces path, with mode perm, with what fill writes to a new
// temporary file in the same directory: a file too large to hold in memory
// whole is streamed. fill may also write at any offset (a header known only
// at the end, such as a checksum, is written back once the rest is); the
// file is synced after fill returns. If fill fails, path is untouched and
// its error is returned (wrapped). The directory must exist.
func WriteFunc(path string, perm os.FileMode, fill func(*os.File) error) error {
	dir, name := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := writeTemp(dir, name, perm, fill)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	// The rename is durable once the directory is synced; failing to sync
	// it leaves a complete file that may not survive a power loss, which
	// is no reason to fail the write.
	_ = SyncDir(dir)
	return nil
}

// WriteTemp writes data, with mode perm, to a new temporary file in dir
// named after name (TempPrefix first, so listings skip it), syncs it and
// returns its path: renaming it over the target then replaces the target
// whole. Callers replacing several files write every temporary file first
// and rename them after.
func WriteTemp(dir, name string, data []byte, perm os.FileMode) (path string, err error) {
	return writeTemp(dir, name, perm, writeData(data))
}

// writeData is a fill that writes data.
func writeData(data []byte) func(*os.File) error {
	return func(f *os.File) error {
		_, err := f.Write(data)
		return err
	}
}

// writeTemp is WriteTemp with the content written by fill.
func writeTemp(dir, name string, perm os.FileMode, fill func(*os.File) error) (path string, err error) {
	f, err := os.CreateTemp(dir, TempPrefix+name+".*")
	if err != nil {
		return "", err
	}
	path = f.Name()
	err = f.Chmod(perm)
	if err == nil {
		err = fill(f)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return "", err
	}
	return path, nil
}

// SyncDir makes the renames into dir durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// File is one file of a set WriteSet writes.
type File struct {
	Name string
	Data []byte
	Perm os.FileMode
}

// WriteSet replaces files in dir, each whole: every temporary file is
// written and synced first (WriteTemp), then all are renamed into place, so
// a failure leaves the old set, or — only if it falls between two renames —
// a mix of whole old and new files. It does not sync dir; callers that need
// the renames to survive a power loss call SyncDir.
func WriteSet(dir string, files []File) error {
	temps := make([]string, 0, len(files))
	defer func() {
		for _, t := range temps {
			_ = os.Remove(t) // gone after a successful rename
		}
	}()
	for _, f := range files {
		t, err := WriteTemp(dir, f.Name, f.Data, f.Perm)
		if err != nil {
			return fmt.Errorf("write %s: %w", filepath.Join(dir, f.Name), err)
		}
		temps = append(temps, t)
	}
	for i, f := range files {
		if err := os.Rename(temps[i], filepath.Join(dir, f.Name)); err != nil {
			return fmt.Errorf("write %s: %w", filepath.Join(dir, f.Name), err)
		}
	}
	temps = nil
	return nil
}
