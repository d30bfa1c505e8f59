package tenants

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
)

// The kinds of object a Store keeps per mesh.
const (
	// kindSpec is the declarative document (Spec.Raw): the operator's.
	kindSpec = "spec"
	// kindStatus is the hub's record of the mesh's incarnation (status,
	// JSON): UID, generation, phase.
	kindStatus = "status"
	// kindSeeded marks a ca.meshes entry as seeded once (no data): a mesh
	// seeded and later deleted is not seeded again.
	kindSeeded = "seeded"
)

var (
	errExists   = errors.New("exists")
	errConflict = errors.New("changed meanwhile")
	errNotFound = errors.New("not found")
)

// blob is one stored object: a mesh's spec, status or seed mark, and the
// version it was read at (for a conditional update or delete).
type blob struct {
	name    string
	data    []byte
	version string
}

// backend keeps blobs by kind and mesh name, shared by every hub replica
// and navectl. Implementations are safe for concurrent use, also across
// processes: create of an existing name fails with errExists for all but
// one caller, and update and remove with a version apply only to that
// version (else errConflict).
type backend interface {
	list(ctx context.Context, kind string) ([]blob, error)
	get(ctx context.Context, kind, name string) (blob, error) // errNotFound
	create(ctx context.Context, kind, name string, data []byte) error
	update(ctx context.Context, kind, name string, data []byte, version string) error
	// remove deletes the blob (only at version, if not ""); a missing
	// blob is no error.
	remove(ctx context.Context, kind, name, version string) error
	// where says where the backend keeps a blob, for errors and logs.
	where(kind, name string) string
}

// contentVersion is a blob's version where the store has none of its own.
func contentVersion(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:12])
}
