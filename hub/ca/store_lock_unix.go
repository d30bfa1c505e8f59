//go:build unix

package ca

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// syscallEROFS is the error of creating a file on a read-only file system.
var syscallEROFS error = syscall.EROFS

// lockDir takes an flock on dir/.lock, exclusive or shared, waiting for it,
// and returns the function that releases it. The kernel releases the lock
// when the process dies, so a crash never leaves the directory locked.
func lockDir(dir string, exclusive bool) (unlock func(), err error) {
	path := filepath.Join(dir, ".lock")
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	}
	if err != nil {
		return nil, err
	}
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	for {
		err = syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}

// LockDir takes the exclusive flock on dir/.lock that a DirStore takes to
// change a mesh, for another store of the hub's state dir that serializes
// its read-modify-writes the same way (hub/tenants).
func LockDir(dir string) (unlock func(), err error) { return lockDir(dir, true) }
