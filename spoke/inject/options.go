package inject

import (
	"errors"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	corev1 "k8s.io/api/core/v1"
)

// Path is where spoke/admission serves the injector.
const Path = "/inject"

// DefaultRevision is the revision a spoke answers for unless configured.
const DefaultRevision = "default"

// Trust is what a pod's agent needs to trust the registration authority
// and the hub, as the spoke learnt it at enrollment. A plain value.
type Trust struct {
	// TrustDomain of the mesh (the SPIFFE IDs' authority).
	TrustDomain string
	// MeshRoots is the PEM of the mesh CA's roots: the RA's certificate
	// and every workload certificate verify against it.
	MeshRoots []byte
	// HubCA is the PEM of the hub's serving CA.
	HubCA []byte
}

// Options configure an Injector.
type Options struct {
	// Revision is the istio.io/rev this spoke injects for; "" is
	// DefaultRevision.
	Revision string
	// SystemNamespace is the spoke's own namespace, never injected.
	// Required.
	SystemNamespace string
	// Mesh and Cluster name the spoke's mesh and cluster. Required.
	Mesh, Cluster string
	// DomainSuffix is the cluster's DNS suffix, for the agent's Envoy node
	// id; "" leaves the agent's default (cluster.local).
	DomainSuffix string
	// ProxyImage runs nave-agent (and holds Envoy and iptables). Required.
	ProxyImage string
	// PullPolicy of the injected containers; "" leaves the cluster's
	// default.
	PullPolicy corev1.PullPolicy
	// RAAddress is the host:port pods reach the spoke's registration
	// authority at. Required.
	RAAddress string
	// XDSAddress is the host:port of the hub's xDS listener; XDSServerName
	// the name its certificate must hold ("" for the host of XDSAddress).
	XDSAddress, XDSServerName string
	// XDSFallbackAddress, if set, is the spoke's fallback xDS server
	// (fallback.listen as pods reach it): the agent lists it second in every
	// bootstrap (docs/fallback.md).
	XDSFallbackAddress string
	// XDSReplicas, if set, are the hub's replicas as NAME=HOST:PORT: the
	// agent lists its pod's namespace's home replica first in every
	// bootstrap (agent xds.replicas; decision 051).
	XDSReplicas []string
	// KeepAppProbes leaves the app containers' probes as written unless a
	// pod's AnnotationRewriteProbes asks otherwise; by default they are
	// rewritten to the agent (Istio's default).
	KeepAppProbes bool
	// MeshConfig, if set, returns the mesh's Istio MeshConfig as the hub
	// last gave it (the spoke's remote view); nil (or a nil result) is
	// Istio's defaults. Its defaultConfig is the ProxyConfig of every pod,
	// under the pod's proxy.istio.io/config annotation.
	MeshConfig func() *meshv1alpha1.MeshConfig
	// Network, if set, returns the network of a namespace's proxies whose
	// pod has no topology.istio.io/network label: the namespace's label,
	// else the spoke's network (kube.Source.NamespaceNetwork); nil (or "")
	// is none. The proxy's node metadata NETWORK and the pod's label take
	// it, as Istio's injector does.
	Network func(namespace string) string
	// Trust returns the spoke's current trust material, or why it has
	// none yet (not enrolled): pods are then refused. Required.
	Trust func() (Trust, error)
	// Logger receives injections (debug) and refusals (info); nil
	// discards them.
	Logger *slog.Logger
	// Registerer receives nave_spoke_inject_pods_total; nil registers
	// nowhere.
	Registerer prometheus.Registerer
}

func (o *Options) check() error {
	switch {
	case o.SystemNamespace == "":
		return errors.New("inject: the spoke's namespace is required")
	case o.Mesh == "" || o.Cluster == "":
		return errors.New("inject: mesh and cluster are required")
	case o.ProxyImage == "":
		return errors.New("inject: the proxy image is required")
	case o.RAAddress == "":
		return errors.New("inject: the registration authority's address is required")
	case o.XDSAddress == "":
		return errors.New("inject: the hub's xDS address is required")
	case o.Trust == nil:
		return errors.New("inject: a source of trust material is required")
	}
	return nil
}
