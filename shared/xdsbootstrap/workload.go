package xdsbootstrap

// Proxy types: the TYPE of an Envoy node id (xds/proxy reads them).
const (
	// ProxySidecar is an Envoy next to one workload.
	ProxySidecar = "sidecar"
	// ProxyRouter is an Envoy gateway (ingress or egress): the hub gives
	// it the listeners of the Gateways whose selector matches its labels.
	ProxyRouter = "router"
)

// Workload is who a bootstrap's node is: a pod (nave-agent) or a VM
// (navectl bootstrap). A plain value.
type Workload struct {
	// ProxyType is the node id's TYPE, ProxySidecar or ProxyRouter; empty
	// is ProxySidecar.
	ProxyType                 string
	Mesh, Cluster             string
	Namespace, ServiceAccount string
	// Name is the pod's or VM's name; NodeName the node it runs on.
	Name, NodeName string
	// IP is the workload's address; empty: none is announced.
	IP string
	// Network is the network the workload is on (node metadata NETWORK,
	// Istio's ISTIO_META_NETWORK); empty: none.
	Network             string
	Labels, Annotations map[string]string
}

// skippedAnnotations are not sent to the hub: large, and of no use to it.
var skippedAnnotations = map[string]bool{"kubectl.kubernetes.io/last-applied-configuration": true}

// NodeID is the workload's Istio node id (see NodeID), with TYPE its
// ProxyType (sidecar when empty).
func (w Workload) NodeID(domainSuffix string) string {
	typ := w.ProxyType
	if typ == "" {
		typ = ProxySidecar
	}
	return NodeID(typ, w.IP, w.Name, w.Namespace, domainSuffix)
}

// Metadata is the node metadata the hub reads (xds/proxy): empty values
// are left out.
func (w Workload) Metadata() map[string]any {
	meta := map[string]any{}
	for k, v := range map[string]string{MetaMesh: w.Mesh, MetaNamespace: w.Namespace, MetaServiceAccount: w.ServiceAccount,
		MetaClusterID: w.Cluster, MetaName: w.Name, MetaInstanceIPs: w.IP, MetaNodeName: w.NodeName, MetaNetwork: w.Network} {
		if v != "" {
			meta[k] = v
		}
	}
	if len(w.Labels) > 0 {
		meta[MetaLabels] = w.Labels
	}
	ann := map[string]string{}
	for k, v := range w.Annotations {
		if !skippedAnnotations[k] {
			ann[k] = v
		}
	}
	if len(ann) > 0 {
		meta[MetaAnnotations] = ann
	}
	return meta
}
