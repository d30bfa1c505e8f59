//go:build !unix

package ca

import "errors"

var syscallEROFS = errors.New("read-only file system")

// lockDir is not implemented off Unix: DirStore needs flock.
func lockDir(string, bool) (func(), error) {
	return nil, errors.ErrUnsupported
}

// LockDir is not implemented off Unix: it needs flock.
func LockDir(string) (func(), error) { return nil, errors.ErrUnsupported }
