package agent

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/navemesh/nave/shared/xdsbootstrap"
	"github.com/navemesh/nave/spoke/agentconfig"
)

// bootstrap is the bootstrap of the agent's mode, from its config and the
// pod's downward API files.
func (a *Agent) bootstrap() ([]byte, error) {
	labels, err := readPodInfo(a.cfg.Pod.LabelsFile)
	if err != nil {
		return nil, fmt.Errorf("pod.labelsFile: %w", err)
	}
	annotations, err := readPodInfo(a.cfg.Pod.AnnotationsFile)
	if err != nil {
		return nil, fmt.Errorf("pod.annotationsFile: %w", err)
	}
	return Bootstrap(a.cfg, labels, annotations)
}

// Bootstrap is the bootstrap an agent with cfg writes for a pod with
// labels and annotations: Envoy's or gRPC's, by cfg.Mode.
func Bootstrap(cfg agentconfig.Config, labels, annotations map[string]string) ([]byte, error) {
	w := Workload(cfg, labels, annotations)
	meta, id := w.Metadata(), w.NodeID(cfg.DomainSuffix)
	pm, err := cfg.ProxyMetadataMap()
	if err != nil {
		return nil, fmt.Errorf("proxyMetadata: %w", err)
	}
	for k, v := range pm {
		// Istio's rule: ISTIO_META_<NAME> is node metadata <NAME>; the
		// agent's own keys win.
		if name, ok := strings.CutPrefix(k, proxyMetadataPrefix); ok && name != "" {
			if k == agentconfig.MetaDNSCapture && cfg.DNSCapture() {
				continue // below
			}
			if _, taken := meta[name]; !taken {
				meta[name] = v
			}
		}
	}
	if cfg.DNSCapture() {
		// "true" as the hub reads it, whatever spelling of true the pod
		// used. Only a sidecar's agent answers DNS; a proxyless (grpc
		// mode) or gateway pod's metadata passes as it is, and its agent
		// opens no name table stream.
		meta[metaDNSCapture] = "true"
	}
	hub, more, home, err := hubAddresses(cfg)
	if err != nil {
		return nil, err
	}
	if home != "" {
		meta[xdsbootstrap.MetaHomeReplica] = home
	}
	if cfg.Mode == agentconfig.ModeGRPC {
		meta[xdsbootstrap.MetaGenerator] = xdsbootstrap.GeneratorGRPC
		file := func(name string) string { return filepath.Join(cfg.Dir, name) }
		b := xdsbootstrap.New(hub, id, meta, &xdsbootstrap.TLSFiles{CACertificateFile: file(HubCAFile),
			CertificateFile: file(CertChainFile), PrivateKeyFile: file(KeyFile)})
		for _, a := range more {
			b = b.WithFallback(a)
		}
		return b.WithFallback(cfg.XDS.FallbackAddress).
			WithServerListenerTemplate(xdsbootstrap.ServerListenerPrefix+"%s").
			WithFileWatcher(xdsbootstrap.CertificateProviderInstance, file(CertChainFile), file(KeyFile), file(RootCertFile), fileWatcherRefresh).
			JSON()
	}
	app := labels["app"]
	if app == "" {
		app = cfg.Pod.Name
	}
	return (&xdsbootstrap.Envoy{
		NodeID: id, Cluster: app + "." + cfg.Pod.Namespace, Metadata: meta,
		XDSAddress: hub, HubAddresses: more, FallbackAddress: cfg.XDS.FallbackAddress, ServerName: cfg.XDS.Host(),
		HubCAPEM: cfg.Trust.HubCA, FallbackRootsPEM: cfg.Trust.MeshRoots, SDSSocket: filepath.Join(cfg.Dir, SDSSocket),
		AdminPort: cfg.Envoy.AdminPort, ReadyPort: cfg.Envoy.ReadyPort,
	}).JSON()
}

// hubAddresses are the hub's addresses in the order a bootstrap lists
// them: with xds.replicas, the pod's namespace's home replica, the other
// replicas in the order to fail over in, then xds.address (decision 051);
// else xds.address alone. home is the home replica's name, empty without
// xds.replicas.
func hubAddresses(cfg agentconfig.Config) (first string, more []string, home string, err error) {
	replicas, err := cfg.XDS.ParsedReplicas()
	if err != nil {
		return "", nil, "", fmt.Errorf("xds.replicas: %w", err)
	}
	if len(replicas) == 0 {
		return cfg.XDS.Address, nil, "", nil
	}
	order := xdsbootstrap.HomeOrder(cfg.Mesh, cfg.Pod.Namespace, replicas)
	for _, r := range order[1:] {
		more = append(more, r.Address)
	}
	return order[0].Address, append(more, cfg.XDS.Address), order[0].Name, nil
}

// metaDNSCapture is the node metadata of a pod whose DNS the agent
// answers (proxyMetadata ISTIO_META_DNS_CAPTURE).
const metaDNSCapture = "DNS_CAPTURE"

// proxyMetadataPrefix marks the proxyMetadata entries that are node
// metadata.
const proxyMetadataPrefix = "ISTIO_META_"

// XDSRoots are the roots the grpc bootstrap's xDS servers are verified
// with (HubCAFile): the hub's serving CA and, with a fallback server, the
// mesh roots as well, since the spoke's fallback server presents its
// cluster certificate, of the mesh CA. grpc-go uses one CA file for every
// server of a bootstrap (xdsbootstrap.WithFallback); the hub never issues
// a cluster certificate for one of its own names (hub/ca), so the mesh
// roots do not let a spoke pass for the hub.
func XDSRoots(cfg agentconfig.Config) string {
	if cfg.XDS.FallbackAddress == "" {
		return cfg.Trust.HubCA
	}
	return strings.TrimRight(cfg.Trust.HubCA, "\n") + "\n" + cfg.Trust.MeshRoots
}

// Workload is the pod as its bootstrap's node describes it.
func Workload(cfg agentconfig.Config, labels, annotations map[string]string) xdsbootstrap.Workload {
	return xdsbootstrap.Workload{ProxyType: cfg.ProxyType, Mesh: cfg.Mesh, Cluster: cfg.Cluster, Namespace: cfg.Pod.Namespace, ServiceAccount: cfg.Pod.ServiceAccount,
		Name: cfg.Pod.Name, NodeName: cfg.Pod.Node, IP: cfg.Pod.IP, Network: cfg.Network, Labels: labels, Annotations: annotations}
}
