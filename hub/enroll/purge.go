package enroll

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// PurgeMesh implements Registry: it removes the mesh's pending join
// tokens first (so that none can be redeemed meanwhile), then its used
// ones, its enrolled clusters, its revocations and its known clusters.
func (s *DirStore) PurgeMesh(_ context.Context, mesh string) error {
	if err := validIdentity(mesh, "x"); err != nil {
		return err
	}
	for _, sub := range []string{dirTokens, dirUsed} {
		names, err := s.list(sub)
		if err != nil {
			return err
		}
		for _, n := range names {
			var f tokenRecord
			if err := s.readJSON(sub, n, &f); err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					continue // redeemed (moved to used/, read next) meanwhile
				}
				return fmt.Errorf("purge mesh %s: %w", mesh, err)
			}
			if f.Mesh == mesh {
				if err := s.remove(sub, n); err != nil {
					return fmt.Errorf("purge mesh %s: %w", mesh, err)
				}
			}
		}
	}
	for _, sub := range []string{dirClusters, dirRevoked, dirKnown} {
		names, err := s.list(sub)
		if err != nil {
			return err
		}
		for _, n := range names {
			if m, _, ok := splitClusterFile(n); ok && m == mesh {
				if err := s.remove(sub, n); err != nil {
					return fmt.Errorf("purge mesh %s: %w", mesh, err)
				}
			}
		}
	}
	return nil
}

// remove deletes sub/name; one already gone is not an error.
func (s *DirStore) remove(sub, name string) error {
	if err := os.Remove(filepath.Join(s.dir, sub, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// PurgeMesh implements Registry: it deletes the mesh's token Secrets
// first (so that none can be redeemed meanwhile), then their -used
// Secrets, its clusters', its revocations', its known clusters' and its
// mesh Secret. It needs
// delete on secrets in the namespace.
func (s *SecretStore) PurgeMesh(ctx context.Context, mesh string) error {
	if err := validIdentity(mesh, "x"); err != nil {
		return err
	}
	tokens, err := s.list(ctx, labelKind+"="+kindToken+","+labelMesh+"="+mesh)
	if err != nil {
		return fmt.Errorf("purge mesh %s: %w", mesh, err)
	}
	var names []string
	for _, t := range tokens {
		names = append(names, t.Name)
	}
	for _, t := range tokens {
		names = append(names, t.Name+secretUsedSuffix)
	}
	rest, err := s.list(ctx, labelKind+" in ("+kindCluster+","+kindRevoked+","+kindKnown+","+kindMesh+"),"+labelMesh+"="+mesh)
	if err != nil {
		return fmt.Errorf("purge mesh %s: %w", mesh, err)
	}
	for _, r := range rest {
		names = append(names, r.Name)
	}
	for _, n := range names {
		if err := s.client.Delete(ctx, s.namespace, n); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("purge mesh %s: %w", mesh, s.apiError("delete", n, err))
		}
	}
	return nil
}
