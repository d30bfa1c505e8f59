package enroll

import (
	"fmt"

	"github.com/navemesh/nave/hub/ca"
)

// OpenStore opens the hub's enrollment store of kind (the hub's
// state.store): ca.StoreDir, a DirStore under stateDir (OpenStateDir), or
// ca.StoreKubernetes, a SecretStore in namespace through the kubeconfig at
// kubeconfigPath (empty: in-cluster, else $KUBECONFIG). The hub and
// navectl both open it this way, so they find the same state.
func OpenStore(kind, stateDir, namespace, kubeconfigPath string, opts ...Option) (Store, error) {
	switch kind {
	case ca.StoreDir:
		return OpenStateDir(stateDir, opts...)
	case ca.StoreKubernetes:
		client, err := ca.OpenSecretClient(kubeconfigPath)
		if err != nil {
			return nil, err
		}
		return NewSecretStore(client, namespace, opts...), nil
	}
	return nil, fmt.Errorf("enrollment store %q: want %s or %s", kind, ca.StoreDir, ca.StoreKubernetes)
}
