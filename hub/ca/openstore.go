package ca

import (
	"fmt"
	"path/filepath"

	"github.com/navemesh/nave/shared/kubeconfig"
)

// Kinds of store the hub keeps its mesh CAs in (its ca.store).
const (
	// StoreDir is a DirStore under the hub's state dir (StateSubdir).
	StoreDir = "dir"
	// StoreKubernetes is a SecretStore: Secret nave-ca-<mesh> of a
	// namespace.
	StoreKubernetes = "kubernetes"
)

// StateSubdir is the subdirectory of the hub's state dir that a StoreDir
// keeps its meshes in (<state dir>/ca/<mesh>/).
const StateSubdir = "ca"

// LocatedStore is a Store that can say where it keeps a mesh.
type LocatedStore interface {
	Store
	Locator
}

// OpenStore opens the hub's mesh CA store of kind: StoreDir under
// stateDir, or StoreKubernetes in namespace through the kubeconfig at
// kubeconfigPath (empty: in-cluster, else $KUBECONFIG). The hub and navectl
// both open it this way, so they find the same CAs.
func OpenStore(kind, stateDir, namespace, kubeconfigPath string) (LocatedStore, error) {
	switch kind {
	case StoreDir:
		return NewDirStore(filepath.Join(stateDir, StateSubdir))
	case StoreKubernetes:
		client, err := OpenSecretClient(kubeconfigPath)
		if err != nil {
			return nil, err
		}
		return NewSecretStore(client, namespace), nil
	}
	return nil, fmt.Errorf("ca store %q: want %s or %s", kind, StoreDir, StoreKubernetes)
}

// OpenSecretClient returns a SecretClient for the API server of the
// kubeconfig at kubeconfigPath (empty: in-cluster credentials, else
// $KUBECONFIG).
func OpenSecretClient(kubeconfigPath string) (SecretClient, error) {
	rc, err := kubeconfig.Load(kubeconfigPath)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	client, err := NewSecretClient(rc)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return client, nil
}
