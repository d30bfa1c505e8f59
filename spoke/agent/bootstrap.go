package agent

import (
	"fmt"
	"path/filepath"

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
	meta := NodeMetadata(cfg, labels, annotations)
	id := xdsbootstrap.NodeID("sidecar", cfg.Pod.IP, cfg.Pod.Name, cfg.Pod.Namespace, cfg.DomainSuffix)
	if cfg.Mode == agentconfig.ModeGRPC {
		meta[xdsbootstrap.MetaGenerator] = xdsbootstrap.GeneratorGRPC
		file := func(name string) string { return filepath.Join(cfg.Dir, name) }
		return xdsbootstrap.New(cfg.XDS.Address, id, meta, &xdsbootstrap.TLSFiles{CACertificateFile: file(HubCAFile),
			CertificateFile: file(CertChainFile), PrivateKeyFile: file(KeyFile)}).
			WithFallback(cfg.XDS.FallbackAddress).
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
		XDSAddress: cfg.XDS.Address, FallbackAddress: cfg.XDS.FallbackAddress, ServerName: cfg.XDS.Host(),
		HubCAPEM: cfg.Trust.HubCA, SDSSocket: filepath.Join(cfg.Dir, SDSSocket),
		AdminPort: cfg.Envoy.AdminPort, ReadyPort: cfg.Envoy.ReadyPort,
	}).JSON()
}

// skippedAnnotations are not sent to the hub: large, and of no use to it.
var skippedAnnotations = map[string]bool{"kubectl.kubernetes.io/last-applied-configuration": true}

// NodeMetadata is the node metadata the hub reads (xds/proxy), from the
// config and the pod's labels and annotations.
func NodeMetadata(cfg agentconfig.Config, labels, annotations map[string]string) map[string]any {
	meta := map[string]any{
		xdsbootstrap.MetaMesh:           cfg.Mesh,
		xdsbootstrap.MetaNamespace:      cfg.Pod.Namespace,
		xdsbootstrap.MetaServiceAccount: cfg.Pod.ServiceAccount,
		xdsbootstrap.MetaClusterID:      cfg.Cluster,
		xdsbootstrap.MetaName:           cfg.Pod.Name,
	}
	if cfg.Pod.IP != "" {
		meta[xdsbootstrap.MetaInstanceIPs] = cfg.Pod.IP
	}
	if cfg.Pod.Node != "" {
		meta[xdsbootstrap.MetaNodeName] = cfg.Pod.Node
	}
	if len(labels) > 0 {
		meta[xdsbootstrap.MetaLabels] = labels
	}
	ann := map[string]string{}
	for k, v := range annotations {
		if !skippedAnnotations[k] {
			ann[k] = v
		}
	}
	if len(ann) > 0 {
		meta[xdsbootstrap.MetaAnnotations] = ann
	}
	return meta
}
