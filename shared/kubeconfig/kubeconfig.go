// Package kubeconfig finds the credentials a nave binary reaches a Kubernetes API server with.
package kubeconfig

import (
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Load reads the kubeconfig file at path; with path empty it uses the pod's in-cluster
// credentials, else $KUBECONFIG or ~/.kube/config.
func Load(path string) (*rest.Config, error) {
	if path != "" {
		return clientcmd.BuildConfigFromFlags("", path)
	}
	if rc, err := rest.InClusterConfig(); err == nil {
		return rc, nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
}
