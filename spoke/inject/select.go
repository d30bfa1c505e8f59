package inject

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Labels and annotations Istio users know, honoured by the injector (see
// docs/injection.md).
const (
	// LabelInject (pod label; also read as the legacy annotation) opts a
	// pod in ("true") or out ("false").
	LabelInject = "sidecar.istio.io/inject"
	// LabelRevision (namespace or pod label) names the revision that
	// injects.
	LabelRevision = "istio.io/rev"
	// LabelNamespaceInjection (namespace label) = enabled injects the
	// namespace's pods with the default revision.
	LabelNamespaceInjection = "istio-injection"
	// AnnotationTemplates chooses the templates (default sidecar).
	AnnotationTemplates = "inject.istio.io/templates"
	// AnnotationStatus marks an injected pod, with what was added.
	AnnotationStatus = "sidecar.istio.io/status"
	// LabelTLSMode tells the mesh an endpoint takes mutual TLS.
	LabelTLSMode = "security.istio.io/tlsMode"
	// LabelCanonicalName and LabelCanonicalRevision name the workload.
	LabelCanonicalName     = "service.istio.io/canonical-name"
	LabelCanonicalRevision = "service.istio.io/canonical-revision"
)

// Names of what the templates add.
const (
	ProxyContainer   = "nave-proxy"
	CaptureContainer = "nave-init"
	VolumeRun        = "nave-run"
	VolumePodInfo    = "nave-podinfo"
	VolumeToken      = "nave-token"
	// istioProxy is Istio's own sidecar: a pod that has one is left alone.
	istioProxy = "istio-proxy"
	istioInit  = "istio-init"
)

// Results of a pod's review, the values of nave_spoke_inject_pods_total's
// result label.
const (
	resultInjected        = "injected"
	resultAlreadyInjected = "already_injected"
	resultOptedOut        = "opted_out"
	resultOtherRevision   = "other_revision"
	resultSystemNamespace = "system_namespace"
	resultHostNetwork     = "host_network"
	resultNotPodCreate    = "not_a_pod_create"
	resultRefused         = "refused"
)

var results = []string{resultInjected, resultAlreadyInjected, resultOptedOut, resultOtherRevision,
	resultSystemNamespace, resultHostNetwork, resultNotPodCreate, resultRefused}

// skip says why pod, created in namespace, is left untouched, as a
// result label and a sentence; "" when it is to be injected. The
// namespace's own labels are the webhook configuration's selectors'
// business (the request does not carry them).
func (in *Injector) skip(namespace string, pod *corev1.Pod) (result, why string) {
	switch namespace {
	case in.opts.SystemNamespace, "kube-system", "kube-public":
		return resultSystemNamespace, "namespace " + namespace + " is never injected"
	}
	if pod.Spec.HostNetwork {
		return resultHostNetwork, "a hostNetwork pod is never injected (its capture would be the node's)"
	}
	if _, ok := pod.Annotations[AnnotationStatus]; ok {
		return resultAlreadyInjected, "already injected (annotation " + AnnotationStatus + ")"
	}
	gateway := asksForGateway(pod.Annotations)
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			if gateway && c.Name == GatewayContainer {
				// The container the gateway template fills (an Istio
				// gateway pod Istio injected has the status annotation).
				continue
			}
			switch c.Name {
			case ProxyContainer, CaptureContainer, istioProxy, istioInit:
				return resultAlreadyInjected, "already has a container " + c.Name
			}
		}
	}
	if v, ok := pod.Labels[LabelInject]; ok && !yes(v) {
		return resultOptedOut, "label " + LabelInject + "=" + v
	}
	if v, ok := pod.Annotations[LabelInject]; ok && !yes(v) {
		if _, labelled := pod.Labels[LabelInject]; !labelled {
			return resultOptedOut, "annotation " + LabelInject + "=" + v
		}
	}
	if rev, ok := pod.Labels[LabelRevision]; ok && rev != in.opts.Revision {
		return resultOtherRevision, "label " + LabelRevision + "=" + rev + " names another revision than this spoke's (" + in.opts.Revision + ")"
	}
	return "", ""
}

// yes reads an inject label or annotation as Istio does: y, yes, true or
// on (any case) opt in; anything else opts out.
func yes(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "y", "yes", "true", "on":
		return true
	}
	return false
}
