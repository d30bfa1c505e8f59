package kubetest

import (
	"path/filepath"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Kubeconfig writes a kubeconfig file for the cluster into t.TempDir() and returns its path, for a
// process under test. It authenticates with the admin token and, unless user is "", impersonates
// user in groups (see As).
func (c *Cluster) Kubeconfig(t testing.TB, user string, groups ...string) string {
	t.Helper()
	const name = "kubetest"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: c.URL, CertificateAuthorityData: c.Admin.CAData}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{
		Token:             c.Admin.BearerToken,
		Impersonate:       user,
		ImpersonateGroups: groups,
	}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name, Namespace: "default"}
	cfg.CurrentContext = name
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatalf("writing a kubeconfig: %v", err)
	}
	return path
}
