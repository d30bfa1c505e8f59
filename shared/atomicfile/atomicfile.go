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
func Write(path string, data []byte, perm os.FileMode) (err error) {
	dir, name := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, TempPrefix+name+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	// The rename is durable once the directory is synced; failing to sync
	// it leaves a complete file that may not survive a power loss, which
	// is no reason to fail the write.
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
